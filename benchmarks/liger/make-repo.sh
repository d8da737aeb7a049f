#!/usr/bin/env bash
# Rebuilds the Liger-Kernel first-parent range BASE..BAD as a small self-contained repository and packs it.
# Why rewrite: the mirror snapshot (/work/.mirror/linkedin+Liger-Kernel/repo) lacks one large blob present in every
# commit (test/resources/tiny_shakespeare_tokenized/data-00000-of-00001.arrow, convergence-test data), so neither
# `git clone`/`git bundle` nor `git archive` can read those commits. Each commit is re-made with that one file left
# out and everything else (tree, author, committer, dates, message) unchanged; the message gets a trailer
# "Upstream-commit: <original sha>" and map.txt lists original -> rewritten. The oldest commit becomes a root.
set -euo pipefail
M=${MIRROR:-/work/.mirror/linkedin+Liger-Kernel/repo}
BASE=${BASE:-37c91c0e95f5916961901a6f0d4d17a1be334374~4}   # 4 commits below GOOD, so GOOD has parents
BAD=${BAD:-91ae44ae659ebaf40d4a851777f4f02515e9ba65}
DROP=test/resources/tiny_shakespeare_tokenized/data-00000-of-00001.arrow
here=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)/liger
git init -q "$W"
echo "$M/objects" > "$W/.git/objects/info/alternates"
export GIT_DIR=$W/.git
: > "$here/map.txt"
parent=""
for c in $(git -C "$M" rev-list --reverse --first-parent "$BASE..$BAD") ; do
  export GIT_INDEX_FILE=$W/.git/tmp-index
  git read-tree "$c^{tree}"
  git rm -q --cached --ignore-unmatch "$DROP"
  tree=$(git write-tree)
  export GIT_AUTHOR_NAME="$(git log -1 --format=%an "$c")" GIT_AUTHOR_EMAIL="$(git log -1 --format=%ae "$c")" \
         GIT_AUTHOR_DATE="$(git log -1 --format=%aD "$c")" GIT_COMMITTER_NAME="$(git log -1 --format=%cn "$c")" \
         GIT_COMMITTER_EMAIL="$(git log -1 --format=%ce "$c")" GIT_COMMITTER_DATE="$(git log -1 --format=%cD "$c")"
  msg=$(git log -1 --format=%B "$c" | git interpret-trailers --trailer "Upstream-commit: $c")
  new=$(printf '%s\n' "$msg" | git commit-tree "$tree" ${parent:+-p "$parent"})
  echo "$c $new $(git log -1 --format=%s "$c")" >> "$here/map.txt"
  parent=$new
  unset GIT_INDEX_FILE
done
git update-ref refs/heads/main "$parent"
git symbolic-ref HEAD refs/heads/main
rm -f "$W/.git/tmp-index" "$W/.git/objects/info/alternates.bak"
git repack -q -a -d -f       # copies what it needs out of the alternate
rm "$W/.git/objects/info/alternates"
git fsck --no-dangling --no-progress
git bundle create "$here/liger.bundle" HEAD main
echo "bundle: $(du -h "$here/liger.bundle" | cut -f1), $(git rev-list --count main) commits"
rm -rf "$(dirname "$W")"
