// doctest entry point for the ragkv test binary; every tests/test-*.cpp adds its cases.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
