#pragma once
// A header without the licence line: check_spdx.py must refuse it (test/headers/meson.build).
