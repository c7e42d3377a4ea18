# lit configuration: runs the `// RUN:` lines of tests/lit/**/*.kir with kiln and FileCheck on PATH.
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".kir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_bin_dir, "tests", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_bin_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
# A sanitized build's runtime library is instrumented: executables that `kiln compile --exe` links
# from it would need that build's sanitizer runtimes too (the GCC build runs those tests).
if config.kiln_sanitize:
    config.available_features.add("sanitized")
    config.environment["LSAN_OPTIONS"] = "print_suppressions=0:suppressions=" + os.path.join(
        config.kiln_src_root, "tests", "lit", "lsan.supp")
# The test runner's thread count for kiln's pools (runtime/thread_pool.h), passed through.
if "KILN_THREADS" in os.environ:
    config.environment["KILN_THREADS"] = os.environ["KILN_THREADS"]
config.substitutions.append(("%kiln_bin_dir", config.kiln_bin_dir))
