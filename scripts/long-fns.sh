#!/usr/bin/env bash
# Function lengths in the workspace (issue 32): every `fn` in crates/*/src, counted from the line
# of `fn` to the line of its closing brace, as the issue counts them. Strings, chars and comments
# are skipped when matching braces; a declaration without a body (trait items) is not counted.
#
# Usage: scripts/long-fns.sh [LIMIT]   (default 150; lists every longer function, longest first)
#        LIST=0 scripts/long-fns.sh    only the summary.
# Last line: RESULT over_150=N over_70=M functions=F   (over_LIMIT when LIMIT is not 150)
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-150}"
LIST="${LIST:-1}"
python3 - "$LIMIT" "$LIST" <<'PY'
import pathlib, re, sys

limit, show = int(sys.argv[1]), sys.argv[2] != "0"
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+\"[^\"]*\")\s+)*fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j): depth += 1; j += 2
                elif text.startswith("*/", j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[i:i + 16])
            if m:
                out.append(" " * len(m.group(0))); i += len(m.group(0))
            else:  # a lifetime or label
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return "".join(out)


fns = []
for path in sorted(pathlib.Path("crates").glob("*/src/**/*.rs")):
    code = code_only(path.read_text())
    lines = code.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos); pos += len(line) + 1
    for no, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        # The body opens at the first `{` before any `;` at depth 0 of parentheses.
        i, paren = offsets[no] + m.end(), 0
        while i < len(code):
            ch = code[i]
            if ch in "([": paren += 1
            elif ch in ")]": paren -= 1
            elif paren == 0 and ch == ";": i = -1; break
            elif paren == 0 and ch == "{": break
            i += 1
        if i < 0 or i >= len(code):
            continue
        depth, j = 0, i
        while j < len(code):
            if code[j] == "{": depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0: break
            j += 1
        end_line = code.count("\n", 0, j)
        fns.append((end_line - no + 1, f"{path}:{no + 1}", m.group(1)))

fns.sort(key=lambda f: (-f[0], f[1]))
over = [f for f in fns if f[0] > limit]
if show:
    for n, where, name in over:
        print(f"{n:5} {name:28} {where}")
name = f"over_{limit}"
print(f"RESULT {name}={len(over)} over_70={sum(1 for f in fns if f[0] > 70)} functions={len(fns)}")
PY
