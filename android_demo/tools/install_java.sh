#!/usr/bin/env bash
# The JDK and JUnit 4 the Java core's tests need, from Debian packages (see ../README.md).
set -euo pipefail
need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
[ -f /usr/share/java/junit4.jar ] || need+=(junit4)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing ${need[*]} (Debian packages)"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get install -y -q "${need[@]}" >/dev/null || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "${need[@]}" >/dev/null; }
