#!/usr/bin/env python3
"""Check every relative link (and #anchor) in README.md and docs/*.md: the
file must exist in the repository, the anchor must be a heading of it, and no
link may leave the repository. Usage: check_links.py REPO_ROOT
(from the repository root: `python3 docs/check_links.py .`)."""
import os, re, sys, glob
root = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else '.')
files = [os.path.join(root, 'README.md')] + sorted(glob.glob(os.path.join(root, 'docs', '*.md')))
link_re = re.compile(r'!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
def slugs(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'): fence = not fence; continue
        if fence: continue
        m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m: continue
        s = m.group(1).strip().lower()
        s = re.sub(r'[^\w\- ]', '', s).replace(' ', '-')
        n = seen.get(s, 0); seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out
bad = n = 0
for f in files:
    text = open(f, encoding='utf-8').read()
    text_nofence = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in link_re.finditer(text_nofence):
        target = m.group(1); n += 1
        rel = os.path.relpath(f, root)
        if re.match(r'[a-z]+:', target):            # http:, https:, mailto:
            print(f'{rel}: external link {target}'); bad += 1; continue
        path, _, anchor = target.partition('#')
        dest = os.path.realpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not (dest == root or dest.startswith(root + os.sep)):
            print(f'{rel}: leaves the repository: {target}'); bad += 1; continue
        if not os.path.exists(dest):
            print(f'{rel}: missing file: {target}'); bad += 1; continue
        if anchor and dest.endswith('.md') and anchor not in slugs(dest):
            print(f'{rel}: missing anchor: {target}'); bad += 1
# references to files outside the repository, linked or not
for f in files:
    for i, line in enumerate(open(f, encoding='utf-8'), 1):
        if re.search(r'\.\./shared|(?<![\w.])\.\./\.\./|/work/', line):
            print(f'{os.path.relpath(f, root)}:{i}: outside path: {line.strip()[:100]}'); bad += 1
print(f'{n} links in {len(files)} files, {bad} problem(s)')
sys.exit(1 if bad else 0)
