#!/usr/bin/env python3
"""Checks the README's architecture table against the build's link graph.

  check_architecture.py REPO_ROOT

Every library a `leap_module(NAME ...)` call defines (one per folder) must have a row in README.md's
architecture table, keyed by its folder, whose "may know" cell names exactly the leap modules the
module links (`leap::X` in its CMakeLists.txt; common's libraries, crypto, log and durable_file, are
every module's and not named). The modules must form no cycle, and no source or header of a module
includes a header of a module it does not link, directly or through its links (the repository root
is every module's include root, so the compiler alone would let a room include a room above it).
A room of policy/ (a module in a folder policy/ROOM/) offers one public header, policy/ROOM/ROOM.hpp,
and nothing else: an include of any other header of the room from outside it is refused, naming
the file and line. The room's own files and the policy rooms' test suite (tests/policy/) may include
its inside.
Prints each mismatch and exits 1.
"""
import pathlib
import re
import sys

COMMON_PARTS = {"common", "crypto", "log", "durable_file"}

# Tests that may include a room's inside: the policy rooms' one test suite.
ROOM_TESTS = "tests/policy/"


def modules(root):
    """name -> (folder, set of leap modules it links)"""
    out = {}
    for cmake in sorted(root.glob("**/CMakeLists.txt")):
        rel = cmake.parent.relative_to(root)
        if rel.parts and rel.parts[0] in ("tests", "build", ".gpu", ".git") or "node_modules" in rel.parts:
            continue
        text = cmake.read_text()
        for call in re.finditer(r"leap_module\(\s*([A-Za-z_]+)([^)]*)\)", text):
            name, args = call.group(1), call.group(2)
            deps = set(re.findall(r"leap::([A-Za-z_]+)", args)) - COMMON_PARTS
            out[name] = (str(rel) + "/", deps)
    return out


def module_of(path, folders):
    """The module whose folder holds `path` (the innermost, so policy/chat/x.hpp is policy_chat's)."""
    best = None
    for name, folder in folders.items():
        if path.startswith(folder) and (best is None or len(folder) > len(folders[best])):
            best = name
    return best


def include_problems(root, mods):
    """An include of another module's header that the including module does not link."""
    folders = {name: folder for name, (folder, _) in mods.items()}

    def reachable(name, seen):
        for dep in mods.get(name, ("", set()))[1]:
            if dep not in seen:
                seen.add(dep)
                reachable(dep, seen)
        return seen

    problems = []
    for name, folder in sorted(folders.items()):
        allowed = reachable(name, {name}) | COMMON_PARTS
        for source in sorted((root / folder).rglob("*.[ch]pp")):
            rel = str(source.relative_to(root))
            if module_of(rel, folders) != name:
                continue  # a module of its own below this folder (actors/torch/ under actors/)
            for header in re.findall(r'^#include "([^"]+)"', source.read_text(), re.M):
                owner = module_of(header, folders)
                if owner is not None and owner not in allowed:
                    problems.append(f"{rel} includes {header} ({owner}), which {name} does not link")
    return problems


def public_headers(mods):
    """folder of each policy room -> its one public header"""
    rooms = {}
    for folder, _ in mods.values():
        parts = folder.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "policy":
            rooms[folder] = f"{folder}{parts[1]}.hpp"
    return rooms


def room_header_problems(root, mods):
    """An include of a policy room's inside from outside the room (its tests aside)."""
    rooms = public_headers(mods)
    problems = []
    for folder, public in sorted(rooms.items()):
        if not (root / public).is_file():
            problems.append(f"{folder}: its public header {public} does not exist")
    skip = ("build", ".git", ".gpu", "node_modules")
    for source in sorted(root.rglob("*.[ch]pp")):
        rel = source.relative_to(root)
        if rel.parts[0] in skip or "node_modules" in rel.parts or str(rel).startswith(ROOM_TESTS):
            continue
        text = source.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            match = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
            if not match:
                continue
            header = match.group(1)
            for folder, public in rooms.items():
                if header.startswith(folder) and not str(rel).startswith(folder) \
                        and header != public:
                    problems.append(f"{rel}:{number}: includes {header}, inside the room "
                                    f"{folder}; include its public header {public}")
    return problems


def table(readme):
    """folder -> the "may know" cell"""
    rows = {}
    in_table = False
    for line in readme.splitlines():
        if line.startswith("| folder | holds | may know"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            folder = re.match(r"`([^`]+)`", cells[0])
            if folder and len(cells) >= 3:
                rows[folder.group(1)] = cells[2]
    return rows


def main(root):
    root = pathlib.Path(root)
    mods = modules(root)
    rows = table((root / "README.md").read_text())
    problems = []
    if not mods:
        problems.append("no leap_module() call found under " + str(root))
    if not rows:
        problems.append("README.md has no architecture table (a '| folder | holds | may know' header)")
    names = set(mods)
    for name, (folder, deps) in sorted(mods.items()):
        if folder not in rows:
            problems.append(f"module '{name}' ({folder}) has no row in README.md's architecture table")
            continue
        said = set(re.findall(r"`([A-Za-z_]+)`", rows[folder])) & names
        if said != deps:
            problems.append(f"{folder}: README says it may know {sorted(said) or 'nothing'}, "
                            f"its CMakeLists.txt links {sorted(deps) or 'nothing'}")
    # No arrow back up: the link graph has no cycle.
    state = {}

    def visit(name, path):
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            problems.append("a cycle among the modules: " + " -> ".join(path + [name]))
            return
        state[name] = "open"
        for dep in sorted(mods.get(name, ("", set()))[1]):
            visit(dep, path + [name])
        state[name] = "done"

    for name in sorted(mods):
        visit(name, [])
    problems.extend(include_problems(root, mods))
    problems.extend(room_header_problems(root, mods))
    for p in problems:
        print(p)
    print(f"{len(mods)} modules, {len(rows)} table rows, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
