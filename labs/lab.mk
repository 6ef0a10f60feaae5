# The Makefile of every exercise folder: each is a copy of labs/lab.mk (tests/labs keeps them
# equal), so a folder copied out of the repository works on its own (labs/README.md).
#   make check      check your starter/ file
#   make emulate    the same, then run it on the emulated network (root)
#   make solution   check the reference solution (instructors)
# The exercise is the number in README.md's title ("# Exercise N: ..."), the student's file
# the Python file in starter/. topolab is $(TOPOLAB) (make TOPOLAB=... or the environment),
# else the one of the checkout this folder is in (../../.venv/bin/topolab), else topolab on PATH.

LAB := $(shell sed -n 's/^\# Exercise \([0-9][0-9]*\): .*/\1/p;q' README.md 2>/dev/null)
STUDENT := $(wildcard starter/*.py)
ifeq ($(strip $(TOPOLAB)),)
TOPOLAB := $(or $(wildcard ../../.venv/bin/topolab),$(shell command -v topolab 2>/dev/null))
endif

NO_TOPOLAB = topolab not found: put a checkout's .venv/bin on PATH, or make $@ TOPOLAB=/path/to/checkout/.venv/bin/topolab
BAD_TOPOLAB = TOPOLAB=$(TOPOLAB): no such command
topolab = $(if $(shell command -v $(firstword $(TOPOLAB)) 2>/dev/null),$(TOPOLAB),$(error $(if $(TOPOLAB),$(BAD_TOPOLAB),$(NO_TOPOLAB))))
lab = $(or $(LAB),$(error README.md does not start with the title line "Exercise N: ..."))
student = $(if $(filter 1,$(words $(STUDENT))),$(STUDENT),$(error starter/ should hold one Python file: $(or $(STUDENT),none)))

check:
	$(topolab) lab check $(lab) --module $(student)

emulate:
	$(topolab) lab check $(lab) --module $(student) --emulate

solution:
	$(topolab) lab check $(lab) --solution

.PHONY: check emulate solution
