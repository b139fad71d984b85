#!/usr/bin/env bash
# Remakes docs/images/report.png: the report.html of the README's bundled scenario as headless
# Chromium (Debian package `chromium`) shows it, 1280 pixels wide. Rerun after changing the page.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./target/release/routersim run scenarios/premium-vs-regular-weighted.yaml --quiet --out "$tmp/run"
# The flags keep a headless browser off the network and out of the user's profile.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$tmp/profile" --hide-scrollbars --window-size=1280,1800 \
    --screenshot="$tmp/report.png" "file://$tmp/run/report.html" 2>/dev/null
mkdir -p docs/images
cp "$tmp/report.png" docs/images/report.png
echo "wrote docs/images/report.png"
