#!/bin/bash
# usage: runall.sh TREE OUTDIR
set -u
TREE=$1; OUT=$2; mkdir -p $OUT
cd $TREE
: > $OUT/summary.txt
for f in benchmarks/explain_corpus/corpus*.json; do
  n=$(basename $f .json)
  case $n in *heldout13*) continue;; esac
  /work/main/.venv/bin/python benchmarks/bench_explain.py --mirrors /work/.mirror --corpus $f --out $OUT/$n.json > $OUT/$n.stdout.txt 2>&1
  echo "$n $(tail -1 $OUT/$n.stdout.txt)" >> $OUT/summary.txt
done
echo DONE >> $OUT/summary.txt
