#!/usr/bin/env python3
"""No function in server/ longer than a reader can hold: every definition at
namespace scope (clang-format puts its signature and its closing brace at
column 0) spans at most MAX_LINES lines, signature to brace. Functions
defined inside a class body are not seen (they are short by habit).

  tests/lint/function_length.py [ROOT]     # exit 1 naming each long function
"""
import pathlib
import sys

MAX_LINES = 150
SIGNATURE_LINES = 6  # a signature wrapped over at most this many lines
NOT_FUNCTIONS = ("namespace", "struct", "class", "enum", "union", "extern", "template", "using", "#", "//", "}")


def opens_body(lines, i):
    """Whether the signature starting at column 0 on line i opens a body:
    its last line ends with "{", either this line or one of the indented
    continuation lines clang-format wraps a long signature into."""
    for j in range(i, min(len(lines), i + SIGNATURE_LINES)):
        if j > i and (not lines[j] or not lines[j][0].isspace()):
            return False
        text = lines[j].rstrip()
        if text.endswith("{"):
            return True
        if text.endswith(";"):
            return False
    return False


def long_functions(root):
    for path in sorted((root / "server").rglob("*.c*")):
        if path.suffix not in (".cc", ".cpp"):
            continue
        lines = path.read_text(encoding="utf-8").split("\n")
        start = None
        for i, line in enumerate(lines):
            if start is None:
                if not line or line[0].isspace() or line.startswith(NOT_FUNCTIONS):
                    continue
                if "=" in line.split("(")[0]:  # a variable's initializer
                    continue
                if "(" not in line or not opens_body(lines, i):
                    continue
                start = i
            elif line.startswith("}"):
                if i - start + 1 > MAX_LINES:
                    yield path.relative_to(root), start + 1, i - start + 1, lines[start].strip()
                start = None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    found = list(long_functions(root))
    for path, line, n, head in found:
        print(f"{path}:{line}: {n} lines (at most {MAX_LINES}): {head}")
    if not (root / "server").is_dir():
        print(f"no server/ under {root}", file=sys.stderr)
        return 2
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
