#!/usr/bin/env python3
"""Checks the rules of the tree that no compiler checks:

- no Rust source file is over 800 lines;
- `docs/ARCHITECTURE.md` is at most 400 lines;
- every repository path that `docs/ARCHITECTURE.md` names exists. A full path (`crates/…`,
  `bins/…`, `migrations/…`, `scripts/…`, `docs/…`, `fixtures/…`, `.ci/…`) must exist as written
  (a `::item` suffix is ignored); a bare file or folder name (`call.rs`, `book/`, `chat/media.rs`)
  must exist somewhere under the crate whose `### `crates/NAME`` (or `bins/NAME`) section names it,
  or under `crates/` (`api/src/tasks.rs`);
- every bullet of its `## Invariants` section names what holds it: a test as
  `` `path/to/file.rs::test_fn` `` (and `fn test_fn` is in that file, or under that folder), or a
  CI step (`.ci/run`, a script under `scripts/`, a test file);
- no crate but `crates/store` (and `crates/testkit`, a test helper) lists sea-orm, sqlx or
  rusqlite under `[dependencies]`, and no crate lists `testkit` there (dev-dependencies only);
- every relative link of `README.md` and `docs/*.md` points inside the repository at a path that
  exists, and a `#anchor` into a Markdown file names one of its headings.

Prints each breach and exits 1 when there is one."""
import re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / 'docs' / 'ARCHITECTURE.md'
MAX_LINES = 800
MAX_ARCHITECTURE_LINES = 400
FULL = re.compile(r'^(crates|bins|migrations|scripts|docs|fixtures|\.ci)(/|$)')
BARE = re.compile(r'^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*(\.(rs|sql|toml|md|py|sh|json)|/)$')
TEST = re.compile(r'^((?:crates|bins)/[A-Za-z0-9_\-/]+(?:\.rs|/))::([a-z_][a-z0-9_]*)$')
HOLDER = re.compile(r'^(\.ci/run|scripts/[A-Za-z0-9_\-]+\.(py|sh)|(crates|bins)/[A-Za-z0-9_\-/]+\.rs)$')
DATABASE_CRATES = ('sea-orm', 'sqlx', 'rusqlite')
# Paths the architecture may name before they exist (none today).
NOT_YET = set()


def long_files():
    for f in sorted(ROOT.glob('**/*.rs')):
        if 'target' in f.relative_to(ROOT).parts[:1] or any(p.startswith('.') for p in f.relative_to(ROOT).parts):
            continue
        n = sum(1 for _ in f.open())
        if n > MAX_LINES:
            yield f'{f.relative_to(ROOT)}: {n} lines (over {MAX_LINES})'


def long_architecture(doc):
    n = len(doc.read_text().splitlines())
    if n > MAX_ARCHITECTURE_LINES:
        yield f'{doc.relative_to(ROOT)}: {n} lines (over {MAX_ARCHITECTURE_LINES})'


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
                if not (ROOT / name).exists() and name.rstrip('/') not in NOT_YET:
                    yield f'{doc.relative_to(ROOT)}:{number}: `{name}` does not exist'
            elif BARE.match(name):
                if section is None or name.endswith(('.toml', '.md', '.json')) and '/' not in name:
                    continue
                target = name.rstrip('/')
                found = (ROOT / 'crates' / target).exists() or any(
                    p.as_posix().endswith('/' + target) for p in section.rglob('*'))
                if not found:
                    yield f'{doc.relative_to(ROOT)}:{number}: `{name}` not found under {section.relative_to(ROOT)}'


def invariant_bullets(doc):
    """(first line number, text) of each bullet of the `## Invariants` section."""
    inside, bullets = False, []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.startswith('## '):
            inside = line.strip() == '## Invariants'
            continue
        if not inside:
            continue
        if line.startswith('- '):
            bullets.append([number, line])
        elif bullets and line.startswith('  '):
            bullets[-1][1] += ' ' + line.strip()
    return bullets


def defines(path, fn):
    files = [path] if path.is_file() else sorted(path.rglob('*.rs')) if path.is_dir() else []
    pattern = re.compile(r'\bfn\s+' + re.escape(fn) + r'\b')
    return any(pattern.search(f.read_text()) for f in files)


def unheld_invariants(doc):
    bullets = invariant_bullets(doc)
    if not bullets:
        yield f'{doc.relative_to(ROOT)}: no `## Invariants` section with bullets'
    for number, text in bullets:
        held = False
        for name in re.findall(r'`([^`\s]+)`', text):
            test = TEST.match(name)
            if test:
                held = True
                if not defines(ROOT / test.group(1), test.group(2)):
                    yield f'{doc.relative_to(ROOT)}:{number}: no `fn {test.group(2)}` in {test.group(1)}'
            elif HOLDER.match(name) and (ROOT / name).exists():
                held = True
        if not held:
            yield f'{doc.relative_to(ROOT)}:{number}: the invariant names no test (`file.rs::test_fn`) or CI step'


def database_dependencies():
    for manifest in sorted(list(ROOT.glob('crates/*/Cargo.toml')) + list(ROOT.glob('bins/*/Cargo.toml'))):
        crate = manifest.parent.relative_to(ROOT).as_posix()
        section = None
        for number, line in enumerate(manifest.read_text().splitlines(), 1):
            if line.startswith('['):
                section = line.strip()
                continue
            name = line.split('=')[0].strip().split('.')[0]
            if section != '[dependencies]':
                continue
            if name in DATABASE_CRATES and crate not in ('crates/store', 'crates/testkit'):
                yield f'{manifest.relative_to(ROOT)}:{number}: {name} outside crates/store'
            elif name == 'testkit':
                yield f'{manifest.relative_to(ROOT)}:{number}: testkit is a dev-dependency only'


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower().replace('`', '')
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def broken_links():
    docs = [ROOT / 'README.md'] + sorted((ROOT / 'docs').glob('*.md'))
    for doc in docs:
        text = doc.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            for target in re.findall(r'\]\(([^)\s]+)\)', line):
                if re.match(r'^[a-z]+:', target):
                    continue
                path, _, anchor = target.partition('#')
                resolved = (doc.parent / path).resolve() if path else doc
                where = f'{doc.relative_to(ROOT)}:{number}'
                if ROOT not in resolved.parents and resolved != ROOT:
                    yield f'{where}: `{target}` points outside the repository'
                    continue
                if not resolved.exists():
                    yield f'{where}: `{target}` does not exist'
                    continue
                if anchor and resolved.suffix == '.md':
                    headings = {slug(h) for h in re.findall(r'^#+ (.*)$', resolved.read_text(), re.M)}
                    if anchor not in headings:
                        yield f'{where}: `{target}`: no such heading in {resolved.relative_to(ROOT)}'


def main():
    breaches = (list(long_files()) + list(long_architecture(ARCHITECTURE)) + list(missing_paths(ARCHITECTURE))
                + list(unheld_invariants(ARCHITECTURE)) + list(database_dependencies()) + list(broken_links()))
    for b in breaches:
        print(b)
    print(f'{len(breaches)} breach(es) of the tree rules')
    sys.exit(1 if breaches else 0)


if __name__ == '__main__':
    main()
