from solution import is_valid_sudoku

VALID = [
    ["5", "3", ".", ".", "7", ".", ".", ".", "."],
    ["6", ".", ".", "1", "9", "5", ".", ".", "."],
    [".", "9", "8", ".", ".", ".", ".", "6", "."],
    ["8", ".", ".", ".", "6", ".", ".", ".", "3"],
    ["4", ".", ".", "8", ".", "3", ".", ".", "1"],
    ["7", ".", ".", ".", "2", ".", ".", ".", "6"],
    [".", "6", ".", ".", ".", ".", "2", "8", "."],
    [".", ".", ".", "4", "1", "9", ".", ".", "5"],
    [".", ".", ".", ".", "8", ".", ".", "7", "9"],
]


def with_cell(r, c, d):
    board = [row[:] for row in VALID]
    board[r][c] = d
    return board


def test_valid():
    assert is_valid_sudoku(VALID)
    assert is_valid_sudoku([["."] * 9 for _ in range(9)])


def test_row_and_column_repeats():
    assert not is_valid_sudoku(with_cell(0, 8, "5"))
    assert not is_valid_sudoku(with_cell(8, 0, "5"))


def test_box_repeat():
    # Each of these repeats a digit of its 3 x 3 box but of neither its row nor its column.
    assert not is_valid_sudoku(with_cell(1, 2, "3"))
    assert not is_valid_sudoku(with_cell(3, 3, "2"))


def test_box_boundaries():
    # Same digit in different boxes, rows and columns: valid.
    board = [["."] * 9 for _ in range(9)]
    board[0][0] = "1"
    board[4][4] = "1"
    board[8][8] = "1"
    assert is_valid_sudoku(board)
    board[2][6] = "2"
    board[6][2] = "2"
    assert is_valid_sudoku(board)
