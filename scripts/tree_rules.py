#!/usr/bin/env python3
"""Checks two rules of the tree that no compiler checks:

- no Rust source file is over 800 lines;
- every repository path that `docs/ARCHITECTURE.md` names exists. A full path (`crates/…`,
  `bins/…`, `migrations/…`, `scripts/…`, `docs/…`, `fixtures/…`, `.ci/…`) must exist as written
  (a `::item` suffix is ignored); a bare file or folder name (`call.rs`, `book/`, `chat/media.rs`)
  must exist somewhere under the crate whose `### `crates/NAME`` (or `bins/NAME`) section names it,
  or under `crates/` (`api/src/tasks.rs`).

Prints each breach and exits 1 when there is one."""
import re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800
FULL = re.compile(r'^(crates|bins|migrations|scripts|docs|fixtures|\.ci)(/|$)')
BARE = re.compile(r'^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*(\.(rs|sql|toml|md|py|sh|json)|/)$')

def long_files():
    for f in sorted(ROOT.glob('**/*.rs')):
        if 'target' in f.relative_to(ROOT).parts[:1] or any(p.startswith('.') for p in f.relative_to(ROOT).parts):
            continue
        n = sum(1 for _ in f.open())
        if n > MAX_LINES:
            yield f'{f.relative_to(ROOT)}: {n} lines (over {MAX_LINES})'

def missing_paths(doc):
    section = None
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        heading = re.match(r'^#{2,4} `((?:crates|bins)/[A-Za-z0-9_\-]+)`', line)
        if heading:
            section = ROOT / heading.group(1)
        elif line.startswith('## '):
            section = None
        for name in re.findall(r'`([^`\s]+)`', line):
            name = name.split('::')[0].rstrip(',.;:')
            if FULL.match(name):
                if not (ROOT / name).exists():
                    yield f'{doc.relative_to(ROOT)}:{number}: `{name}` does not exist'
            elif BARE.match(name):
                if section is None or name.endswith(('.toml', '.md', '.json')) and '/' not in name:
                    continue
                target = name.rstrip('/')
                found = (ROOT / 'crates' / target).exists() or any(
                    p.as_posix().endswith('/' + target) for p in section.rglob('*'))
                if not found:
                    yield f'{doc.relative_to(ROOT)}:{number}: `{name}` not found under {section.relative_to(ROOT)}'

def main():
    breaches = list(long_files()) + list(missing_paths(ROOT / 'docs' / 'ARCHITECTURE.md'))
    for b in breaches:
        print(b)
    print(f'{len(breaches)} breach(es) of the tree rules')
    sys.exit(1 if breaches else 0)

if __name__ == '__main__':
    main()
