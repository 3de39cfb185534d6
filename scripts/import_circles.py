#!/usr/bin/env python3
"""Lists the file-level import circles of each crate: groups of source files that reach each other.

A file reaches another when one of its paths resolves into it, the way rustc resolves it:

- `crate::…`, `super::…` (also `super::super::…`) and `self::…` paths, in `use` trees and in code;
- bare paths whose first segment is a module declared in the file (`mod wire;`, then `wire::Foo`
  or `use wire::Foo`) or a name the file brought in with `use` (`use super::wire::{self, …}`,
  then `wire::header_line`);
- names reached through another module's `use` bindings (re-exports): `crate::transport::Response`
  is the `Response` that `transport/mod.rs` takes from `client.rs`, so it reaches `client.rs`;
  globs (`use super::*`) are followed for the names the glob's module declares or binds;
- intra-doc links in doc comments (`[`crate::tasks`]`, `[`super::client`]`, `[text](path)`):
  rustdoc resolves them in the same scope, and they break when their target moves.

Inline modules (`mod tests { … }`) are scopes of their own: their `super` is the file's module.
Crate roots (`lib.rs`, `main.rs`) are left out as ends of an edge: they declare every module and
re-export, so every file would meet them (their re-exports are still followed). Exit status 1 when
there are more circles than the number given as the first argument (default: no limit).

`--edges CRATE_SRC` prints one crate's edges instead (for example `crates/upstream/src`)."""
import re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDENT = r'[A-Za-z_][A-Za-z0-9_]*'
KEYWORDS = {'crate', 'super', 'self', 'Self'}
ITEM = re.compile(r'\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(' + IDENT + r')|macro_rules!\s*(' + IDENT + r')')
BARE_PATH = re.compile(r'(?<![A-Za-z0-9_:$.])(' + IDENT + r'(?:::' + IDENT + r')+)')
DOC_LINK = re.compile(r'\[`?((?:' + IDENT + r'::)*' + IDENT + r')(?:\(\))?!?`?\](?![(\[:])'
                      r'|\]\(`?((?:' + IDENT + r'::)*' + IDENT + r')(?:\(\))?`?\)'
                      r'|^\s*\[[^\]]+\]:\s*`?((?:' + IDENT + r'::)*' + IDENT + r')`?\s*$', re.M)


def module_of(src: Path, f: Path):
    parts = list(f.relative_to(src).with_suffix('').parts)
    if parts[-1] in ('lib', 'main', 'mod'):
        parts = parts[:-1]
    return tuple(parts)


def split_code_and_docs(text):
    """The text with comments, string and char literals blanked (lengths kept, so offsets hold),
    and the doc comments' text as (offset, text) pairs."""
    out, docs, i, n = [], [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            end = text.find('\n', i)
            end = n if end < 0 else end
            if text.startswith(('///', '//!'), i) and not text.startswith('////', i):
                docs.append((i, text[i + 3:end]))
            out.append(' ' * (end - i)); i = end
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j): depth += 1; j += 2
                elif text.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', text[i:i + 40]) and (i == 0 or not re.match(r'[A-Za-z0-9_]', text[i - 1])):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r'[^\n]', ' ', text[i:end])); i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j + 1])); i = j + 1
        elif c == "'" and re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", text[i:i + 12])
            out.append(' ' * len(m.group(0))); i += len(m.group(0))
        else:
            out.append(c); i += 1
    return ''.join(out), docs


def parse_use_tree(tree):
    """`a::{b, c::d as e, f::*}` → [(binding, [segments])]; a binding of '*' is a glob."""
    tree = re.sub(r'\s+', ' ', re.sub(r'\s*(::|\{|\}|,)\s*', r'\1', tree.strip()))
    def walk(s, prefix):
        brace = s.find('{')
        if brace < 0:
            name, _, alias = s.partition(' as ')
            segs = [x for x in name.strip().split('::') if x]
            if segs and segs[-1] == 'self':
                segs = segs[:-1]
            if not prefix + segs:
                return []
            return [(alias.strip() or (prefix + segs)[-1], prefix + segs)]
        head = [x for x in s[:brace].split('::') if x]
        body, depth, items, start = s[brace + 1:s.rfind('}')], 0, [], 0
        for k, ch in enumerate(body):
            if ch == '{': depth += 1
            elif ch == '}': depth -= 1
            elif ch == ',' and depth == 0:
                items.append(body[start:k]); start = k + 1
        items.append(body[start:])
        return [b for item in items if item.strip() for b in walk(item.strip(), prefix + head)]
    return walk(tree, [])


class Scope:
    """One module: a file's, or an inline `mod name { … }` inside it."""
    def __init__(self, path, file_module):
        self.path, self.file_module = path, file_module
        self.children, self.uses, self.items = set(), [], set()
        self.code, self.docs = [], []


def scopes_of(src: Path):
    files = {module_of(src, f): f for f in src.rglob('*.rs')}
    scopes = {}
    for m, f in files.items():
        code, docs = split_code_and_docs(f.read_text())
        # Inline modules: their spans, innermost last.
        spans = []
        for decl in re.finditer(r'\bmod\s+(' + IDENT + r')\s*\{', code):
            depth, j = 1, decl.end()
            while j < len(code) and depth:
                depth += {'{': 1, '}': -1}.get(code[j], 0); j += 1
            spans.append((decl.start(), j, decl.group(1)))
        def scope_at(offset):
            path = list(m)
            for start, end, name in spans:
                if start <= offset < end:
                    path.append(name)
            return tuple(path)
        scopes.setdefault(m, Scope(m, m))
        for start, end, name in spans:
            path = scope_at(start)
            scopes.setdefault(path, Scope(path, m))
            scopes[path[:-1]].children.add(name)
        for decl in re.finditer(r'\bmod\s+(' + IDENT + r')\s*;', code):
            scopes[scope_at(decl.start())].children.add(decl.group(1))
        for item in ITEM.finditer(code):
            scopes[scope_at(item.start())].items.add(item.group(1) or item.group(2))
        for use in re.finditer(r'\buse\s+([^;]*);', code):
            scope = scopes[scope_at(use.start())]
            scope.uses.extend(parse_use_tree(use.group(1)))
            code = code[:use.start()] + ' ' * (use.end() - use.start()) + code[use.end():]
        for p in BARE_PATH.finditer(code):
            scopes[scope_at(p.start())].code.append(p.group(1).split('::'))
        for offset, doc in docs:
            for link in DOC_LINK.finditer(doc):
                target = next(g for g in link.groups() if g)
                # An inner doc (`//!`) documents its own module; an outer one (`///`) an item
                # of the module it is in: both resolve in the module the comment sits in.
                scopes[scope_at(offset)].docs.append(target.split('::'))
    return files, scopes


def crate_graph(src: Path):
    files, scopes = scopes_of(src)
    modules = set(scopes)

    def first(scope, seg, seen):
        """Where the first segment of a path written in `scope` leads, or None (an external
        crate, a local item, a primitive)."""
        if seg == 'crate':
            return ()
        if seg == 'self':
            return scope.path
        if seg == 'super':
            return scope.path[:-1]
        if seg in scope.children:
            return scope.path + (seg,)
        for name, target in scope.uses:
            if name == seg:
                return absolute(scope, target, seen)
        for name, target in scope.uses:
            if name == '*':
                glob = absolute(scope, target, seen)
                if glob is not None and glob in scopes and provides(scopes[glob], seg):
                    return glob + (seg,)
        return None

    def provides(scope, name):
        return name in scope.children or name in scope.items or any(n == name for n, _ in scope.uses)

    def absolute(scope, segs, seen):
        """The absolute path that `segs`, written in `scope`, names (module path + item names)."""
        key = (scope.path, tuple(segs))
        if key in seen:
            return None
        seen = seen | {key}
        base = first(scope, segs[0], seen)
        if base is None:
            return None
        rest = list(segs[1:])
        while segs[0] == 'super' and rest and rest[0] == 'super':
            base, rest = base[:-1], rest[1:]
        if segs[0] in ('crate', 'self', 'super') and rest and rest[0] == 'self':
            rest = rest[1:]
        return follow(tuple(base), rest, seen)

    def follow(base, rest, seen):
        """Walks `rest` down from module `base`, through other modules' `use` bindings."""
        path = base
        for k, seg in enumerate(rest):
            if path + (seg,) in modules:
                path = path + (seg,)
                continue
            here = scopes.get(path)
            if here is not None:
                for name, target in here.uses:
                    if name == seg:
                        through = absolute(here, target, seen)
                        if through is not None:
                            return follow(through, rest[k + 1:], seen)
                for name, target in here.uses:
                    if name == '*':
                        glob = absolute(here, target, seen)
                        if glob is not None and glob in scopes and provides(scopes[glob], seg):
                            return follow(glob, rest[k:], seen)
            return path + tuple(rest[k:])
        return path

    def file_of(path):
        for n in range(len(path), -1, -1):
            if path[:n] in files:
                return path[:n]
        return ()

    edges = {m: set() for m in files}
    for scope in scopes.values():
        refs = [t for _, t in scope.uses] + scope.code + scope.docs
        for segs in refs:
            if segs == ['*'] or not segs:
                continue
            target = absolute(scope, segs, frozenset())
            if target is None:
                continue
            t = file_of(target)
            if t != scope.file_module:
                edges[scope.file_module].add(t)
    roots = {m for m, f in files.items() if f.name in ('lib.rs', 'main.rs')}
    return files, {m: {t for t in ts if t not in roots} for m, ts in edges.items() if m not in roots}


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(comp)
    for v in sorted(edges):
        if v not in index: visit(v)
    return out


def main():
    if len(sys.argv) > 2 and sys.argv[1] == '--edges':
        src = (ROOT / sys.argv[2]).resolve()
        files, edges = crate_graph(src)
        for m in sorted(edges):
            print(files[m].relative_to(src), '->', ', '.join(sorted(str(files[t].relative_to(src)) for t in edges[m])))
        return
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else None
    total = 0
    for src in sorted(list(ROOT.glob('crates/*/src')) + list(ROOT.glob('bins/*/src'))):
        files, edges = crate_graph(src)
        for comp in sccs(edges):
            total += 1
            names = sorted(str(files[m].relative_to(ROOT)) for m in comp)
            print(' <-> '.join(names))
    print(f'{total} file-level import circle(s)')
    if limit is not None and total > limit:
        sys.exit(1)


if __name__ == '__main__':
    main()
