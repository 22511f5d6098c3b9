def parse_csv_line(line):
    return [f[1:-1] if f.startswith('"') and f.endswith('"') and len(f) > 1 else f for f in line.split(",")]
