#!/bin/sh
# The suite on Node 24 and glibc 2.41: a Debian 13 (trixie) root made with debootstrap from
# Debian's packages, the official Node binary from the npm registry (`node-linux-<arch>`), npm
# itself from the registry too, a copy of this checkout, `npm ci`, then the tests, against the
# machine's PostgreSQL (TEST_DATABASE_URL, when it answers) and the embedded one.
#
#   scripts/ci-node24.sh                  # the whole suite
#   scripts/ci-node24.sh test/api/keys    # only the test files whose path contains this
#
# .ci/run calls it after the README's test command; `npm test` never needs it. Needs root (or
# sudo) for debootstrap, chroot and mounts, and the network for Debian's and npm's registries.
# The root and the npm cache are kept in $BURROW_CI_CACHE (default /var/cache/burrow-ci, else
# ~/.cache/burrow-ci) and reused: only the first run pays for debootstrap (about 20-60 s).
#
# Inside, everything runs as an unprivileged user: a chrooted process may not create user
# namespaces, so burrowd's embedded PostgreSQL (which as root runs under `unshare --user`) must
# start as a user other than root.
set -eu

FILTER=${1:-}
NODE_MAJOR=${NODE_MAJOR:-24}
SUITE=${DEBIAN_SUITE:-trixie}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SRC=$(cd "$(dirname "$0")/.." && pwd)

if [ "$(id -u)" != 0 ]; then exec sudo --preserve-env=TEST_DATABASE_URL,TEST_PARALLEL,BURROW_CI_CACHE,NODE_MAJOR,DEBIAN_SUITE,DEBIAN_MIRROR "$0" "$@"; fi

if [ -z "${BURROW_CI_CACHE:-}" ]; then
  if mkdir -p /var/cache/burrow-ci 2>/dev/null; then BURROW_CI_CACHE=/var/cache/burrow-ci; else BURROW_CI_CACHE=$HOME/.cache/burrow-ci; fi
fi
case "$(uname -m)" in
  x86_64) ARCH=x64 ;;
  aarch64) ARCH=arm64 ;;
  *) echo "ci-node24: no official Node build for $(uname -m)" >&2; exit 1 ;;
esac
ROOT=$BURROW_CI_CACHE/$SUITE-$ARCH
# What the tests need beyond minbase: curl and psql (README and move tests), openssl (TLS tests
# make certificates), procps (pgrep), libnss3, libexpat1 and a font (the headless Chromium of the browser
# tests), ca-certificates (npm's registry), pebble (the ACME tests' CA and DNS, with curl).
PACKAGES=ca-certificates,curl,openssl,procps,libnss3,libexpat1,fonts-dejavu-core,postgresql-client,pebble
USER_NAME=burrow-ci
USER_ID=${BURROW_CI_UID:-1000}
log() { echo "ci-node24: $*" >&2; }

# 1. The Debian root, once: minbase plus $PACKAGES.
if [ ! -e "$ROOT/.burrow-ci-complete" ]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  log "debootstrap $SUITE into $ROOT"
  rm -rf "$ROOT.tmp"
  mkdir -p "$BURROW_CI_CACHE"
  debootstrap --variant=minbase --include="$PACKAGES" \
    "$SUITE" "$ROOT.tmp" "$MIRROR" >"$BURROW_CI_CACHE/debootstrap.log" 2>&1 || { tail -20 "$BURROW_CI_CACHE/debootstrap.log" >&2; exit 1; }
  chroot "$ROOT.tmp" useradd --create-home --uid "$USER_ID" --shell /bin/sh "$USER_NAME"
  rm -rf "$ROOT" && mv "$ROOT.tmp" "$ROOT"
  touch "$ROOT/.burrow-ci-complete"
fi

# 2. Node and npm from the npm registry (the newest $NODE_MAJOR.x, kept until a newer one is out).
NODE_VERSION=$(npm view "node-linux-$ARCH@$NODE_MAJOR" version --json | node -e '
  const key = (v) => v.split(".").map((n) => n.padStart(6, "0")).join(".");
  const vs = [].concat(JSON.parse(require("fs").readFileSync(0, "utf8")));
  console.log(vs.sort((a, b) => (key(a) < key(b) ? -1 : 1)).pop());')
if [ ! -x "$ROOT/opt/node-$NODE_VERSION/bin/node" ]; then
  log "node-linux-$ARCH@$NODE_VERSION and npm@11 from the npm registry"
  PKGS=$(mktemp -d)
  (cd "$PKGS" && npm pack --silent "node-linux-$ARCH@$NODE_VERSION" npm@11 >/dev/null)
  mkdir -p "$ROOT/opt/node-$NODE_VERSION.tmp/bin" "$ROOT/opt/node-$NODE_VERSION.tmp/lib/node_modules/npm"
  tar -xzf "$PKGS"/node-linux-*.tgz -C "$ROOT/opt/node-$NODE_VERSION.tmp" --strip-components=1 package/bin/node
  tar -xzf "$PKGS"/npm-*.tgz -C "$ROOT/opt/node-$NODE_VERSION.tmp/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$ROOT/opt/node-$NODE_VERSION.tmp/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$ROOT/opt/node-$NODE_VERSION.tmp/bin/npx"
  rm -rf "$PKGS" "$ROOT/opt/node-$NODE_VERSION"
  mv "$ROOT/opt/node-$NODE_VERSION.tmp" "$ROOT/opt/node-$NODE_VERSION"
fi

# 3. A fresh copy of the checkout (without node_modules, dist or .git), owned by the user.
WORK=$ROOT/home/$USER_NAME/burrow
rm -rf "$WORK"
mkdir -p "$WORK"
tar -C "$SRC" --exclude=./node_modules --exclude=./dist --exclude=./.git --exclude=./burrow-data -cf - . | tar -C "$WORK" -xf -
chown -R "$USER_ID:$USER_ID" "$WORK"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The machine's own CAs (e.g. a TLS-inspecting proxy's) are trusted in the root too; npm and
# node there use the system's bundle.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
fi

# A root made before a package joined the list gets it now (the root is kept between runs).
MISSING=$(for p in $(echo "$PACKAGES" | tr ',' ' '); do chroot "$ROOT" dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$MISSING" ]; then
  log "installing into the root: $MISSING"
  chroot "$ROOT" apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive chroot "$ROOT" apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
fi

# 4. /proc, /dev (with /dev/shm: PostgreSQL's shared memory) and /sys, unmounted on any exit.
cleanup() {
  for m in "$ROOT/sys" "$ROOT/dev" "$ROOT/proc"; do
    if mountpoint -q "$m"; then umount -R "$m" 2>/dev/null || umount -lR "$m"; fi
  done
}
trap cleanup EXIT INT TERM
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/dev" || { mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"; }
mountpoint -q "$ROOT/sys" || { mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"; }

# 5. npm ci and the tests, as the user. The platform line comes first.
TEST_CMD='npm test'
if [ -n "$FILTER" ]; then TEST_CMD="npx tsc -p . && node dist/test/run.js '$FILTER'"; fi
chroot --userspec="$USER_ID:$USER_ID" "$ROOT" /usr/bin/env -i \
  HOME="/home/$USER_NAME" USER="$USER_NAME" PATH="/opt/node-$NODE_VERSION/bin:/usr/bin:/bin" LANG=C.UTF-8 \
  TEST_DATABASE_URL="${TEST_DATABASE_URL:-}" TEST_PARALLEL="${TEST_PARALLEL:-}" CI=1 \
  NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt npm_config_cafile=/etc/ssl/certs/ca-certificates.crt \
  npm_config_update_notifier=false \
  /bin/sh -euc "
    cd ~/burrow
    npm ci --no-audit --no-fund --loglevel=error >/dev/null
    echo \"\$(node scripts/platform-line.mjs); Debian \$(cat /etc/debian_version)\"
    $TEST_CMD
  "
