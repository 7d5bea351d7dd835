#!/bin/bash
# Builds the MacRack host package, on a Mac, from signed binaries:
#   /Library/MacRack/bin/{agent,vm-helper,macrack-runner-stage}
#   /Library/LaunchDaemons/io.macrack.{agent,reboot}.plist
# with scripts/postinstall, as a product archive an MDM installs.
#
#   deploy/macos/build-pkg.sh BIN_DIR VERSION OUT.pkg ["Developer ID Installer: ..."]
#
# Without an installer identity the package is unsigned: fine to inspect,
# refused by an MDM.
set -euo pipefail

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
	echo "usage: $0 BIN_DIR VERSION OUT.pkg [INSTALLER_IDENTITY]" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 version=$2 out=$3 identity=${4:-}
for b in agent vm-helper macrack-runner-stage; do
	if [ ! -x "$bin/$b" ]; then
		echo "$0: $bin/$b is missing or not executable" >&2
		exit 1
	fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/Library/MacRack/bin" "$root/Library/LaunchDaemons"
cp "$bin/agent" "$bin/vm-helper" "$bin/macrack-runner-stage" "$root/Library/MacRack/bin/"
chmod 0755 "$root/Library/MacRack/bin/agent" "$root/Library/MacRack/bin/vm-helper" \
	"$root/Library/MacRack/bin/macrack-runner-stage"
cp "$here/io.macrack.agent.plist" "$here/io.macrack.reboot.plist" "$root/Library/LaunchDaemons/"
chmod 0644 "$root/Library/LaunchDaemons/"*.plist

# --ownership recommended: the payload is root:wheel, whoever built it.
pkgbuild --root "$root" --install-location / --identifier io.macrack.agent --version "$version" \
	--ownership recommended --scripts "$here/scripts" "$work/macrack-agent-component.pkg"
if [ -n "$identity" ]; then
	productbuild --package "$work/macrack-agent-component.pkg" --sign "$identity" "$out"
else
	productbuild --package "$work/macrack-agent-component.pkg" "$out"
fi
echo "$out: MacRack host package $version${identity:+, signed by $identity}"
