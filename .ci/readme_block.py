"""Print a fenced block of the README as it is written, so that CI runs the README's own
commands and code (and the two cannot drift): the block right after the line
`<!-- ci: NAME -->`. `python .ci/readme_block.py NAME [README]`; exit 1 when the README has
no such block, or more than one."""

import re
import sys
from pathlib import Path


def block(text: str, name: str) -> str:
    found = re.findall(r"^<!-- ci: " + re.escape(name) + r" -->\n```[a-z]*\n(.*?)^```$", text,
                       flags=re.M | re.S)
    if len(found) != 1:
        raise SystemExit(f"readme_block: {len(found)} blocks marked <!-- ci: {name} -->")
    return found[0]


if __name__ == "__main__":
    readme = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parents[1] / "README.md"
    sys.stdout.write(block(readme.read_text(), sys.argv[1]))
