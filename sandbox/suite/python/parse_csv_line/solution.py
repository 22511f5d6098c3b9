def parse_csv_line(line):
    fields = []
    i, n = 0, len(line)
    while True:
        if i < n and line[i] == '"':
            i += 1
            value = []
            while i < n:
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        value.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                value.append(line[i])
                i += 1
            field = "".join(value)
            end = line.find(",", i)
        else:
            end = line.find(",", i)
            field = line[i:] if end < 0 else line[i:end]
        fields.append(field)
        if end < 0:
            return fields
        i = end + 1
