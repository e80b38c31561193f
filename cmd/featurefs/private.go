package main

import "syscall"

// privateUmask makes what the commands that hold features (mount, serve,
// warm, cache) create private to their user, umask 077: the cache (whose
// package also sets its modes itself), a feature-store directory, logs and
// profiles hold features derived from images that may be private. extract
// writes where the user says, with the user's umask.
func privateUmask() { syscall.Umask(0o077) }
