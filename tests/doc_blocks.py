"""The fenced blocks of a Markdown page, as the doc tests read them (tests/test_docs.py
checks docs/language.md, tests/test_tutorial.py runs docs/tutorial.md and the README's
tour):

- every fence opens with ```LANG and closes with a bare ```;
- an ```mdl-error block is followed by `<!-- error: MESSAGE -->`, the message it fails
  with (`Block.expected`);
- a ```text block right after an ```sh block is the output the page shows for it
  (`Block.shown` of the sh block: its non-blank lines)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

FENCE = re.compile(r"^```([\w-]*)\s*$")
ERROR_NOTE = re.compile(r"^<!-- error: (.+?) -->\s*$")


@dataclass
class Block:
    lang: str
    line: int                 # 1-based line of the opening fence
    text: str
    page: str = ""            # the page's name in messages
    expected: str = ""        # mdl-error: the message it fails with
    shown: list[str] = field(default_factory=list)  # sh: the output shown after it
    end: int = 0              # 0-based line where a block directly after this one opens

    @property
    def id(self) -> str:
        return f"{self.lang}@L{self.line}"

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str, name: str, languages: tuple[str, ...] | None = None) -> list[Block]:
    """The fenced blocks of `page` (called `name` in messages) in order; with
    `languages`, a block in any other language is an error."""
    lines = page.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None and lines[end].strip() == "```", \
            f"{name}:{i + 1}: a fence that is not closed cleanly"
        block = Block(m.group(1), i + 1, "\n".join(lines[i + 1:end]) + "\n", page=name)
        assert languages is None or block.lang in languages, \
            f"{name}:{i + 1}: unknown block language {block.lang!r}"
        after = next((k for k in range(end + 1, len(lines)) if lines[k].strip()), len(lines))
        if block.lang == "mdl-error":
            note = ERROR_NOTE.match(lines[after]) if after < len(lines) else None
            assert note, f"{name}:{end + 1}: an mdl-error block needs " \
                "`<!-- error: ... -->` after it"
            block.expected = note.group(1)
        if block.lang == "text" and out and out[-1].lang == "sh" and out[-1].end == i:
            out[-1].shown = [line.rstrip() for line in block.text.splitlines() if line.strip()]
        block.end = after
        out.append(block)
        i = end + 1
    return out
