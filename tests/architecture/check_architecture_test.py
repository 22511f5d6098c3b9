#!/usr/bin/env python3
"""tools/check_architecture.py on small trees: a policy room's inside included from outside the room
is refused with the file and line; its one public header, the room's own files and tests/policy/
may include what they do; a room's public header is refused to a module that does not link it.

  check_architecture_test.py REPO_ROOT
"""
import pathlib
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else ".") / "tools" / "check_architecture.py"

README = """| folder | holds | may know |
| --- | --- | --- |
| `policy/chat/` | chat | nothing |
| `actors/` | actors | `policy_chat` |
"""


def tree(root, files):
    base = {
        "README.md": README,
        "policy/chat/CMakeLists.txt": "leap_module(policy_chat)\n",
        "policy/chat/chat.hpp": "#pragma once\n",
        "policy/chat/detail/inner.hpp": "#pragma once\n",
        "policy/chat/chat.cpp": '#include "policy/chat/chat.hpp"\n#include "policy/chat/detail/inner.hpp"\n',
        "actors/CMakeLists.txt": "leap_module(actors PUBLIC_DEPS leap::policy_chat)\n",
    }
    base.update(files)
    for rel, text in base.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def check(files):
    with tempfile.TemporaryDirectory() as tmp:
        tree(pathlib.Path(tmp), files)
        run = subprocess.run([sys.executable, str(SCRIPT), tmp], capture_output=True, text=True)
        return run.returncode, run.stdout


class RoomHeaders(unittest.TestCase):
    def test_the_public_header_passes(self):
        rc, out = check({"actors/a.cpp": '#include "policy/chat/chat.hpp"\n'})
        self.assertEqual(rc, 0, out)

    def test_the_inside_from_outside_is_refused_with_file_and_line(self):
        rc, out = check({"actors/a.cpp": '#include <vector>\n#include "policy/chat/detail/inner.hpp"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("actors/a.cpp:2: includes policy/chat/detail/inner.hpp", out)
        self.assertIn("include its public header policy/chat/chat.hpp", out)

    def test_a_header_beside_the_public_one_is_inside_too(self):
        rc, out = check({"policy/chat/other.hpp": "#pragma once\n",
                         "actors/a.hpp": '#include "policy/chat/other.hpp"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("actors/a.hpp:1: includes policy/chat/other.hpp", out)

    def test_other_tests_are_refused_and_the_rooms_tests_are_not(self):
        rc, out = check({"tests/policy/inner_test.cpp": '#include "policy/chat/detail/inner.hpp"\n'})
        self.assertEqual(rc, 0, out)
        rc, out = check({"tests/actors/a_test.cpp": '#include "policy/chat/detail/inner.hpp"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("tests/actors/a_test.cpp:1:", out)

    def test_a_room_the_module_does_not_link_is_refused_through_its_public_header_too(self):
        # A room beside policy/chat/ that links nothing (as policy/http/ does): a module that links
        # only it may include its header, and not chat's, even though the include root allows it.
        files = {"README.md": README + "| `policy/http/` | http | nothing |\n"
                                       "| `daemon/` | daemon | `policy_http` |\n",
                 "policy/http/CMakeLists.txt": "leap_module(policy_http)\n",
                 "policy/http/http.hpp": "#pragma once\n",
                 "daemon/CMakeLists.txt": "leap_module(daemon PRIVATE_DEPS leap::policy_http)\n",
                 "daemon/d.cpp": '#include "policy/http/http.hpp"\n'}
        rc, out = check(files)
        self.assertEqual(rc, 0, out)
        files["daemon/d.cpp"] += '#include "policy/chat/chat.hpp"\n'
        rc, out = check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("daemon/d.cpp includes policy/chat/chat.hpp (policy_chat), which daemon does "
                      "not link", out)

    def test_a_room_without_its_public_header_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            tree(pathlib.Path(tmp), {})
            (pathlib.Path(tmp) / "policy/chat/chat.hpp").unlink()
            run = subprocess.run([sys.executable, str(SCRIPT), tmp], capture_output=True, text=True)
        self.assertEqual(run.returncode, 1, run.stdout)
        self.assertIn("policy/chat/: its public header policy/chat/chat.hpp does not exist", run.stdout)


if __name__ == "__main__":
    unittest.main()
