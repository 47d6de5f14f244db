"""The reference on-device loop: runners, vocabulary bridge, n-gram cache, verification."""
