#!/usr/bin/env bash
# The pictures in docs/GUIDE.md, made by the optcast tool (the simulator and the schedule
# code themselves): docs/pictures/make.sh [PATH/TO/optcast] [OUTDIR]. The test
# `pictures_in_step` makes them again and fails if a committed one differs.
set -euo pipefail
tool=${1:-build/tools/optcast}
out=${2:-$(dirname "$0")}
karp=(--collective broadcast --algorithm logp_tree --p 8 --bytes 1 --model logp:6,2,4)
# Karp et al., Figure 1: the optimal broadcast tree for P = 8, L = 6, o = 2, g = 4, and its timeline.
"$tool" simulate "${karp[@]}" --tree-svg "$out/karp_figure1_tree.svg" --svg "$out/karp_figure1_timeline.svg" >/dev/null
# Träff's Algorithm 1 under the rounds model: p = 17, three blocks, 3 - 1 + 5 = 7 rounds.
"$tool" simulate --collective broadcast --algorithm circulant --p 17 --bytes 3 --blocks 3 --svg "$out/circulant_p17_rounds.svg" >/dev/null
# Träff's Table 1: the schedules of p = 17.
"$tool" schedule --p 17 --svg "$out/traff_table1_p17.svg" >/dev/null
# Alexandrov et al.: the LogGP scatter on its split tree, 12 ranks of 64 bytes.
"$tool" simulate --collective scatter --algorithm split_tree --p 12 --bytes 64 --model loggp:5,1,2,0.01 --svg "$out/loggp_scatter_p12.svg" >/dev/null
