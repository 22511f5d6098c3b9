def is_valid_sudoku(board):
    for i in range(9):
        row = [d for d in board[i] if d != "."]
        col = [board[r][i] for r in range(9) if board[r][i] != "."]
        if len(row) != len(set(row)) or len(col) != len(set(col)):
            return False
    return True
