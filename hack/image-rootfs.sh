#!/bin/sh
# The steps that make kohort's image out of a Debian bookworm root file system with python3.11:
# run as root inside it, by hack/build-image.sh (`make image`, in a chroot) and by the Dockerfile
# alike, so both builds install the same thing the same way.
#
#   image-rootfs.sh WHEELHOUSE PIP_WHEEL
# WHEELHOUSE holds kohort's wheel and its dependencies' (constraints.txt's pins); PIP_WHEEL is a
# pip wheel, run from the file: the image gets no pip.
set -eu
wheels=$1
pip_wheel=$2

python3.11 -m venv --without-pip /opt/kohort
# Bytecode is compiled now (the root file system is read-only at run time), hash-checked rather
# than timestamped when SOURCE_DATE_EPOCH is set, so that a rebuild gives the same bytes.
/opt/kohort/bin/python "$pip_wheel/pip" install --quiet --no-index --find-links "$wheels" \
  --disable-pip-version-check --no-cache-dir --root-user-action=ignore kohort
/opt/kohort/bin/python -m compileall -q /opt/kohort
/opt/kohort/bin/kohort --help >/dev/null

# 65532 is the conventional "nonroot" user id; the chart's securityContext uses the same.
echo 'nonroot:x:65532:65532:kohort:/tmp:/usr/sbin/nologin' >>/etc/passwd
echo 'nonroot:x:65532:' >>/etc/group
