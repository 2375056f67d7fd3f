#!/bin/sh
# A worker for the `heft run` failure tests (tests/cli/run_test.cc).
# Usage: exit_rank.sh DIR FAILING_RANK ACTION ARG
# Every worker writes its pid to DIR/worker-RANK.pid and starts `sleep 60` in the
# background, whose pid goes to DIR/sleep-RANK.pid (so a test can check that the workers'
# own children are gone too). Rank FAILING_RANK (-1: none) waits until every other rank has
# done so, then does ACTION: "exit ARG" exits with code ARG, "kill ARG" sends itself signal
# ARG. The other ranks wait for their sleep.
dir=$1
failing=$2
action=$3
arg=$4

echo $$ > "$dir/worker-$RANK.tmp" && mv "$dir/worker-$RANK.tmp" "$dir/worker-$RANK.pid"
if [ "$RANK" = "$failing" ]; then
  others=$((WORLD_SIZE - 1))
  tries=0
  while [ "$(ls "$dir" | grep -c '^sleep-.*\.pid$')" -lt "$others" ] && [ "$tries" -lt 400 ]; do
    sleep 0.05
    tries=$((tries + 1))
  done
  case "$action" in
    exit) exit "$arg" ;;
    kill) kill -s "$arg" $$ ;;
  esac
  exit 99
fi
sleep 60 &
echo $! > "$dir/sleep-$RANK.tmp" && mv "$dir/sleep-$RANK.tmp" "$dir/sleep-$RANK.pid"
wait
