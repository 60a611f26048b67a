# crowdpref's keeper (services/keeper.py says what and why): bash -c "$(cat keeper.sh)" crowdpref-keeper
# NAME TERM_SIGNALS SETSID SETPRIV -- ARGV. Runs ARGV in its own session; starts it again when it dies.
name=$1 term_signals=$2 setsid=$3 setpriv=$4
shift 5
armed=0 stopping=0 released=0 delay=1 alive=0 termed=0
exec 3>&2 2>/dev/null  # the child's errors go to the log (3); bash's own job notices nowhere
# each said in the log, where the manager waits for it (services/process.py)
trap 'armed=1; say "$name is up: started again if it dies"' USR1
trap 'released=1; say "$name is being stopped: not started again"' USR2
# the first SIGTERM goes to the service at once: the loop may be just entering its wait
trap 'stopping=1; ((alive && !termed)) && kill -TERM -- "-$child" 2>/dev/null && termed=1' TERM INT HUP
say() { printf '%(%Y-%m-%d %H:%M:%S)T crowdpref-keeper: %s\n' -1 "$*"; }
spawn() { "$setsid" "$setpriv" --pdeathsig TERM -- "$@" 2>&3 3>&- & child=$! started=$SECONDS alive=1 termed=0; }
finish() {
  if ((alive)); then
    for ((i = termed; i < term_signals; i++)); do ((i)) && sleep 1; kill -TERM -- "-$child" 2>/dev/null; done
    while ((alive)); do done=; wait -p done "$child"; [[ -n $done ]] && ! kill -0 "$child" 2>/dev/null && alive=0; done
  fi
  exit 0
}
spawn "$@"
while :; do
  ((stopping)) && finish
  done=; wait -p done "$child"; code=$?
  [[ -z $done ]] && continue
  kill -0 "$child" 2>/dev/null && continue  # a signal woke the wait (bash may then say -1): it still runs
  alive=0
  ((code < 0)) && { wait "$child"; code=$?; }  # its status, where a signal's wake hid it
  ((stopping)) && finish
  if ((code > 128)); then how="killed by SIG$(kill -l "$code")"; else how="exit code $code"; fi
  ((armed)) || { say "$name ended while starting ($how)"; exit "$code"; }
  ((released)) && { say "$name ended ($how)"; exit 0; }
  ran=$((SECONDS - started))
  ((ran >= 60)) && delay=1
  say "$name died ($how) after $ran s: starting it again in $delay s"
  sleep "$delay" & pause=$!
  while kill -0 "$pause" 2>/dev/null; do wait "$pause"; ((stopping)) && { kill "$pause"; finish; }; done
  spawn "$@"
  say "$name started again (pid $child)"
  delay=$((delay * 2 > 30 ? 30 : delay * 2))
done
