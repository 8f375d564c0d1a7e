# Attention, from the dot product to DeepSeek. `make help` lists what you can run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FIRST  := 00_tokens_and_embeddings.ipynb
NPROC  := $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

# Headless machines get no browser; root needs --allow-root.
LAB_FLAGS ?= $(if $(DISPLAY)$(filter Darwin,$(shell uname -s)),,--no-browser) \
             $(if $(filter 0,$(shell id -u)),--allow-root,)
# nbval compares the stored outputs of solutions/; addresses and timings are sanitized.
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with autograder/nbval_sanitize.cfg

.PHONY: help env triton lab test test-cpus test-fast nbval sync release check-release submit timing mutants grade-all check-env clean hub hub-proxy

help:
	@echo "make lab                 create .venv if missing, open JupyterLab on course/ (notebook 00)"
	@echo "make triton              add Triton to .venv for notebook 15 (a 198 MB download, 0.7 GB installed)"
	@echo "make test                everything CI checks: unit tests, wrong solutions, solutions run once (full marks, stored outputs), stubs, release"
	@echo "make test-cpus           the numerically sensitive tests on this machine's other CPU paths (no AVX, AVX2) and thread counts (1, all)"
	@echo "make nbval               execute solutions/ under nbval and compare every stored output, figures included"
	@echo "make test-fast           reference kernels and wrong solutions only, no notebook execution (maintainers)"
	@echo "make submit NB=PATH      grade one notebook, a score per exercise (add JSON=1 for JSON)"
	@echo "make sync [NB=STEM]      rebuild solutions/*.ipynb from their .py text sources and execute them"
	@echo "make release [NB=STEM]   regenerate course/ from solutions/ (instructors, maintainers)"
	@echo "make check-release       fail if course/ differs from what solutions/ generates"
	@echo "make timing [NB=STEM]    each notebook's headless run and its submits (solution, stub), side by side"
	@echo "make mutants [NB=\"04 05\"] mutate the model answers: grading must kill every mutant the broad oracle family sees (LIMIT=N per exercise)"
	@echo "make grade-all DIR=PATH  grade DIR/<learner>/*.ipynb in parallel (JOBS=N, DB=URL) into grading/: grades.csv, feedback/, gradebook"
	@echo "make check-env           OK/FAIL for every requirement of the environment"
	@echo "make hub [LEARNERS=3]    (root) JupyterHub for a class on localhost:8000: prints the URL and the accounts (hub/)"

# pip, not uv or poetry: torch==2.13.0 resolves to a locally provided CPU wheel where there is one.
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	# bytecode of the course's modules, which grading loads afresh in every kernel (even where
	# PYTHONDONTWRITEBYTECODE keeps Python from writing it): 4 ms a module saved at every submit
	$(BIN)/python -m compileall -q $(CURDIR)/utils $(CURDIR)/autograder
	touch $(STAMP)

env: $(STAMP)

# Notebook 15's one extra (requirements-triton.txt): only what needs it installs it.
TRITON := $(VENV)/.triton
$(TRITON): requirements-triton.txt $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-triton.txt
	touch $(TRITON)

triton: $(TRITON)

# The tests' one extra (requirements-test.txt): transformers, the ground truth of notebook 16's
# reference, for the parity tests only; learners never install it.
TESTEXTRA := $(VENV)/.test-extra
$(TESTEXTRA): requirements-test.txt $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $(TESTEXTRA)

# LAB_DIR and LAB_ARGS let the browser test (autograder/tests/test_browser.py) start this same
# JupyterLab on a copy of course/ with a free port and a known token.
LAB_DIR  ?= course
LAB_ARGS ?=
lab: $(STAMP)
	@echo "Starting JupyterLab on $(LAB_DIR)/ with $(FIRST) open; open the http://127.0.0.1 URL printed below."
	cd $(LAB_DIR) && JUPYTER_CONFIG_PATH=$(CURDIR)/autograder PATH=$(CURDIR)/$(BIN):$$PATH \
		$(CURDIR)/$(BIN)/jupyter lab --LabApp.default_url=/lab/tree/$(FIRST) $(LAB_FLAGS) $(LAB_ARGS)

# Both cores: pytest-xdist, each notebook's nbval cells kept on one worker (conftest.py).
XDIST ?= -n $(NPROC) --dist loadgroup
# Each solution is executed once, by the full-marks submit test, which also compares its stored
# outputs (autograder/tests/outputs.py); `make nbval` runs nbval itself, figures included.
test: $(STAMP) $(TRITON) $(TESTEXTRA)
	$(BIN)/python -m pytest $(XDIST) utils autograder

# The numerically sensitive tests (reference kernels, the checkpoint's retraining, every check on
# the right solutions, each solution's score and stored outputs) on the CPU paths other
# processors take, each with one thread and with all (the machine's own path with all is `make
# test`): `default`, no vector instructions in PyTorch's kernels, MKL's conservative path
# (MKL_CBWR=COMPATIBLE) and oneDNN's SSE4.1; `avx2` (x86-64 only), a processor without AVX-512;
# `native`, the machine's own. The path each run really took is printed first.
CPU_PATHS ?= default $(if $(filter x86_64 amd64,$(shell uname -m)),avx2,) native
# A wrong solution fails by more than rounding; a right one must not fail by rounding on any path: the
# valid alternatives are what another processor's arithmetic could wrongly reject. Each solution's
# full marks and stored outputs (17 notebooks executed, most of the time) on the two paths farthest
# from the machine's own, `default` with one thread and `avx2` with all: CI stays within 45 minutes.
CPU_TESTS ?= utils "autograder/tests/test_wrong_solutions.py::test_valid_alternative_passes"
CPU_SUBMITS ?= autograder/tests/test_submit.py::test_solution_scores_full_marks_and_reproduces_its_outputs
CPU_SUBMIT_PATHS ?= default-1 $(if $(filter x86_64 amd64,$(shell uname -m)),avx2-$(NPROC),default-$(NPROC))
CPU_ENV_default := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41
CPU_ENV_avx2    := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
CPU_ENV_native  :=
test-cpus: $(STAMP) $(TRITON) $(TESTEXTRA)
	@set -e; $(foreach cap,$(CPU_PATHS),for threads in 1 $(NPROC); do \
	    if [ $(cap) = native ] && [ $$threads = $(NPROC) ]; then continue; fi; \
	    env $(CPU_ENV_$(cap)) OMP_NUM_THREADS=$$threads $(BIN)/python -c "import torch; print('== CPU path', \
	        torch.backends.cpu.get_cpu_capability(), 'with', torch.get_num_threads(), 'thread(s): $(or $(CPU_ENV_$(cap)),the native path)')"; \
	    submits=; if echo " $(CPU_SUBMIT_PATHS) " | grep -q " $(cap)-$$threads "; then submits="$(CPU_SUBMITS)"; fi; \
	    env $(CPU_ENV_$(cap)) OMP_NUM_THREADS=$$threads $(BIN)/python -m pytest -q $(XDIST) $(CPU_TESTS) $$submits; \
	done;)

# --dist loadfile: all cells of a notebook on one worker (loadgroup split a notebook's cells
# between workers under pytest 9 / xdist 3.8, and a cell then ran without the ones before it).
nbval: $(STAMP) $(TRITON)
	$(BIN)/python -m pytest -n $(NPROC) --dist loadfile $(NBVAL) solutions

# The reference kernels and the collection of wrong solutions: no notebook is executed.
test-fast: $(STAMP) $(TRITON) $(TESTEXTRA)
	$(BIN)/python -m pytest $(XDIST) -m "not slow" utils autograder

sync: $(STAMP) $(TRITON)
	$(BIN)/python -m autograder sync $(NB)

release: $(STAMP)
	$(BIN)/python -m autograder release $(NB)

check-release: $(STAMP)
	$(BIN)/python -m autograder release --check

submit: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make submit NB=course/01_dot_product_attention.ipynb"; exit 2; }
	@$(BIN)/python -m autograder submit "$(NB)" $(if $(JSON),--json,)

# Exit 1 when a submit misses the goals (10 s, and headless + 3 s); run it on a quiet machine.
timing: $(STAMP) $(TRITON)
	$(BIN)/python -m autograder timing $(NB)

# Tests of the tests (autograder/mutants.py): exit 1 when a mutant the oracle sees survives grading.
mutants: $(STAMP) $(TRITON)
	$(BIN)/python -m autograder mutants $(NB) $(if $(LIMIT),--limit $(LIMIT),)

# JOBS: notebooks graded at once (default: every core); DB: a shared gradebook, e.g. PostgreSQL.
grade-all: $(STAMP)
	@test -n "$(DIR)" || { echo "usage: make grade-all DIR=submissions [JOBS=N] [DB=postgresql+psycopg://user@host/db]  (DIR/<learner>/<notebook>.ipynb)"; exit 2; }
	$(BIN)/python -m autograder grade-all "$(DIR)" --out grading $(if $(JOBS),--jobs $(JOBS),) $(if $(DB),--db "$(DB)",)

# JupyterHub's proxy from npm, kept in build/hub/ (autograder/tests/test_hub.py skips without it).
CHP := build/hub/node_modules/.bin/configurable-http-proxy
$(CHP):
	mkdir -p build/hub
	npm install --prefix build/hub --no-audit --no-fund --loglevel=error configurable-http-proxy@5.3.0 >/dev/null
hub-proxy: $(CHP)

# A class on this machine (root: accounts are created); Ctrl-C stops it and removes them.
LEARNERS ?= 3
hub: $(STAMP) $(CHP)
	$(BIN)/python -m hub.course_hub --learners $(LEARNERS) $(if $(PORT),--port $(PORT),)

check-env: $(STAMP)
	$(BIN)/python -m utils.check_env

clean:
	rm -rf feedback grading build .pytest_cache
