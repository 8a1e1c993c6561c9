set -u
source tools/gpu/setup.sh > $OUT/setup.log 2>&1; tail -4 $OUT/setup.log
git log --oneline | head -1
python3 tools/time_to_answer.py --json $OUT/tta-pretrain-1.json --results-dir /tmp/llmbench/pre1 --goal-wall 150 --goal-share 0.6 -- timeout --foreground 260 python3 -m pytest benchmarks/test_pretrain.py -p no:cacheprovider -q > $OUT/pretrain-1.log 2>&1
grep -v "^  /tmp\|^test_pretrain\[" $OUT/pretrain-1.log | tail -32
python3 tools/gpu/checks.py /tmp/llmbench/pre1 > $OUT/checks-pretrain-1.txt 2>&1; tail -3 $OUT/checks-pretrain-1.txt
cat /tmp/llmbench/pre1/latest/trace-ahead.json; tail -3 /tmp/llmbench/pre1/latest/trace-ahead.log
for i in 1 2; do t0=$(date +%s.%N); python3 -m pytest --co -q benchmarks/test_pretrain.py -p no:cacheprovider > /dev/null 2>&1; echo "collect-only wall $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s"; done
timeout 150 python3 tools/gpu/pin_speed.py --settings default --exits normal,hard --rounds 2 --json $OUT/exit.json > $OUT/exit.log 2>&1; cat $OUT/exit.log
tar czf $OUT/runs.tgz -C /tmp/llmbench pre1
