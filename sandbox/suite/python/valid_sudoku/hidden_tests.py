import random

from solution import is_valid_sudoku

SOLVED = [
    "534678912", "672195348", "198342567",
    "859761423", "426853791", "713924856",
    "961537284", "287419635", "345286179",
]


def _board(rows):
    return [list(r) for r in rows]


def _expected(board):
    units = [[(r, c) for c in range(9)] for r in range(9)] + [[(r, c) for r in range(9)] for c in range(9)]
    units += [[(br + r, bc + c) for r in range(3) for c in range(3)] for br in (0, 3, 6) for bc in (0, 3, 6)]
    for unit in units:
        digits = [board[r][c] for r, c in unit if board[r][c] != "."]
        if len(digits) != len(set(digits)):
            return False
    return True


def test_full_board():
    assert is_valid_sudoku(_board(SOLVED))
    swapped = _board(SOLVED)
    swapped[0][0], swapped[0][1] = swapped[0][1], swapped[0][0]
    assert not is_valid_sudoku(swapped)


def test_last_box_and_column():
    board = _board(["........."] * 9)
    board[6][6] = "4"
    board[8][8] = "4"
    assert not is_valid_sudoku(board)
    board = _board(["........."] * 9)
    board[0][8] = "9"
    board[8][8] = "9"
    assert not is_valid_sudoku(board)
    board = _board(["........."] * 9)
    board[2][2] = "7"
    board[3][3] = "7"
    assert is_valid_sudoku(board)


def test_random_boards():
    for _ in range(80):
        board = _board(SOLVED)
        for r in range(9):
            for c in range(9):
                if random.random() < 0.6:
                    board[r][c] = "."
        for _ in range(random.randint(0, 2)):
            board[random.randrange(9)][random.randrange(9)] = random.choice("123456789")
        assert is_valid_sudoku(board) == _expected(board)
