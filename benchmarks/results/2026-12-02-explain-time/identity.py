"""sha256 of static_diff's whole output per corpus commit: python identity.py TREE OUT.json"""
import hashlib, json, subprocess, sys, time, resource
from pathlib import Path
tree, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
from bisector.analysis import static_diff
corpora = sorted(Path(tree, 'benchmarks/explain_corpus').glob('corpus*.json'))
scratch = Path('/tmp/ident/clones'); scratch.mkdir(exist_ok=True)
result = {}
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime
for corpus in corpora:
    if 'heldout13' in corpus.name: continue
    for entry in json.loads(corpus.read_text())['commits']:
        clone = scratch / (entry['repo'].replace('/', '+') + '.git')
        if not clone.exists():
            subprocess.run(['git', 'clone', '-q', '--bare', '--shared', f"/work/.mirror/{entry['repo'].replace('/', '+')}/repo", str(clone)], check=True)
        c = cpu()
        try:
            d = static_diff(clone, entry['commit'])
            text = repr((d.findings, getattr(d, 'notes', None)))
        except Exception as e:
            text = 'error ' + repr(e)
        result[f"{corpus.name}:{entry['repo']}:{entry['commit']}"] = [hashlib.sha256(text.encode()).hexdigest()[:16], round(cpu() - c, 3)]
Path(out).write_text(json.dumps(result, indent=0))
print(len(result), 'commits; cpu total', round(sum(v[1] for v in result.values()), 1))
