#!/bin/bash
# Every explain corpus but heldout13 (written blind for the next round), one after another, from a tree TREE (an
# export of the commit measured): bench_explain.py's JSON and output per corpus and one summary line each in OUTDIR.
# usage: loop.sh TREE OUTDIR TAG
tree=$1; out=$2; tag=$3
mkdir -p $out
cd $tree
for c in benchmarks/explain_corpus/corpus*.json; do
  name=$(basename $c .json)
  case $name in *heldout13*) continue;; esac
  /work/main/.venv/bin/python benchmarks/bench_explain.py --mirrors /work/.mirror --corpus $c --out $out/$name-$tag.json > $out/$name-$tag.stdout 2>&1
  echo "$name $(tail -1 $out/$name-$tag.stdout)" >> $out/summary-$tag.txt
done
