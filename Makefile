# The two commands of README.md: `make demo` and `make test`. Everything else is a helper.
.PHONY: demo test build setup bench clean hybrid

demo:
	@scripts/demo.sh

test:
	@scripts/test.sh

setup:
	@scripts/setup.sh

hybrid:
	@scripts/make_hybrid.sh --small

build:
	@scripts/build.sh build Release

bench: build
	@.venv/bin/python bench/compare_llamacpp.py

clean:
	rm -rf build build-asan build-fuzz build-tsan
