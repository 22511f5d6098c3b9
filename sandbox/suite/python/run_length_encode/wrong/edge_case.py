def run_length_encode(s):
    out = []
    prev, count = s[0], 0
    for ch in s:
        if ch == prev:
            count += 1
        else:
            out.append(prev + str(count))
            prev, count = ch, 1
    out.append(prev + str(count))
    return "".join(out)
