// SPDX-License-Identifier: MIT
// Preloaded into the sanitizer build's test processes (test/meson.build, setup
// 'sanitize'): dlclose does nothing, so the plugins Open MPI, PMIx and UCX load
// stay mapped until exit, and LeakSanitizer can name the library of a leak they
// made (lsan.supp suppresses those by library). Without it a plugin's leak
// shows as "<unknown module>", and naming it took a slow unwind on every
// malloc (fast_unwind_on_malloc=0): the sanitizer tests three times as long.
extern "C" int dlclose(void* /*handle*/) { return 0; }
