#!/bin/sh
# The commit-msg hook (.githooks/commit-msg) on messages whose verdict is
# known: prints "commit_msg_hook: ok" when each is taken or refused as
# CONTRIBUTING.md says.
hook="$1"
LC_ALL=C
export LC_ALL
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
# expect VERDICT NAME: runs the hook on $dir/NAME; VERDICT is take or refuse.
expect() {
  if "$hook" "$dir/$2" 2>"$dir/err"; then got=take; else got=refuse; fi
  if [ "$got" != "$1" ]; then
    echo "commit_msg_hook: $2: expected $1, got $got: $(cat "$dir/err")"
    fail=1
  fi
}
s72=$(printf 'a%.0s' $(seq 1 72))
printf '%s\n' "$s72" > "$dir/subject72"
expect take subject72
printf '%sb\n' "$s72" > "$dir/subject73"
expect refuse subject73
printf 'Fix the thing\n\nThe detail, on as many lines as it needs, each of them\nlonger than seventy-two characters if they must be, since only the subject is bounded.\n' > "$dir/body"
expect take body
printf 'Fix the thing\nno blank line before the body\n' > "$dir/no_blank"
expect refuse no_blank
printf '\n\nbody without a subject\n' > "$dir/empty_subject"
expect refuse empty_subject
printf '# a comment git strips, longer than seventy-two characters: it does not count at all\nShort subject\n' > "$dir/comment"
expect take comment
# Characters, not bytes: 72 of them in UTF-8 pass, whatever the locale
# of whoever commits (this script runs in the C locale).
printf '%s\n' "$(printf 'é%.0s' $(seq 1 72))" > "$dir/utf8"
expect take utf8
printf '%s\n' "$(printf 'é%.0s' $(seq 1 73))" > "$dir/utf8_73"
expect refuse utf8_73
[ "$fail" = 0 ] && echo "commit_msg_hook: ok"
exit "$fail"
