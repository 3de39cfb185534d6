#!/usr/bin/env python3
"""Lists the file-level import circles of each crate: groups of source files that reach each other
through `crate::…`, `super::…` and `self::…` paths. Crate roots (`lib.rs`, `main.rs`) are left out:
they declare every module and re-export, so every file would meet them. Exit status 1 when there
are more circles than the number given as the first argument (default: no limit)."""
import os, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r'\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)')
USE_GROUP = re.compile(r'\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}', re.S)

def module_of(src: Path, f: Path):
    rel = f.relative_to(src).with_suffix('')
    parts = list(rel.parts)
    if parts[-1] in ('lib', 'main', 'mod'):
        parts = parts[:-1]
    return tuple(parts)

def strip_comments(text):
    text = re.sub(r'//[^\n]*', '', text)
    return re.sub(r'/\*.*?\*/', '', text, flags=re.S)

def crate_graph(src: Path):
    files = {}
    for f in src.rglob('*.rs'):
        files[module_of(src, f)] = f
    def resolve(path):
        # longest prefix of `path` that is a module file
        for n in range(len(path), -1, -1):
            if tuple(path[:n]) in files:
                return tuple(path[:n])
        return ()
    edges = {m: set() for m in files}
    for m, f in files.items():
        text = strip_comments(f.read_text())
        is_dir_module = f.name in ('mod.rs', 'lib.rs', 'main.rs')
        here = list(m) if is_dir_module else list(m)
        refs = []
        for g in USE_GROUP.finditer(text):
            base, head, body = g.group(1), g.group(2), g.group(3)
            for item in re.split(r'[,\s]+', re.sub(r'\{[^}]*\}', '', body)):
                item = item.split(' as ')[0].strip()
                if item and re.match(r'^[A-Za-z_][A-Za-z0-9_:]*$', item):
                    refs.append((base, head + '::' + item))
            for inner in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{', body):
                refs.append((base, head + '::' + inner.group(1)))
        for p in PATH.finditer(text):
            refs.append((p.group(1), p.group(2)))
        for base, rest in refs:
            segs = [s for s in rest.split('::') if s]
            if base == 'crate':
                target = segs
            elif base == 'self':
                target = here + segs
            else:
                up = here[:-1]
                while segs and segs[0] == 'super':
                    segs = segs[1:]; up = up[:-1]
                target = up + segs
            t = resolve(target)
            if t != m and t in files:
                edges[m].add(t)
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
    for v in edges:
        if v not in index: visit(v)
    return out

def main():
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
