#!/usr/bin/env python3
"""Every repository file a script names exists. Scripts that the suite never
runs rot silently when a file moves: scripts/fuzz listed
server/engine/sampling.cc after it moved to server/sampler/, and
no fuzz target built. This reads scripts/*, .ci/run and the Dockerfiles and
checks each path under a top-level source folder with a source extension.

  tests/lint/script_paths.py [ROOT]     # exit 1 naming each missing path
"""
import pathlib
import re
import sys

PATH = re.compile(
    r"(?<![\w/.$-])((?:server|kernels|tests|bench|proto|deploy|docs|scripts)/[A-Za-z0-9_./-]+"
    r"\.(?:cc|h|cu|cuh|proto|py|sh|md|mjs|yaml|json))(?!\w)"
)


def scripts(root):
    for p in sorted((root / "scripts").iterdir()):
        if p.is_file():
            yield p
    for name in (".ci/run", "Dockerfile", "deploy/Dockerfile.cuda"):
        if (root / name).is_file():
            yield root / name


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    missing = []
    for script in scripts(root):
        text = script.read_text(errors="replace")
        for path in sorted(set(PATH.findall(text))):
            if not (root / path).exists():
                missing.append(f"{script.relative_to(root)}: names {path}, which does not exist")
    for line in missing:
        print(line)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
