"""Wrong and valid solutions of every exercise, one module per notebook.

Each module defines WRONG = {exercise: {label: (fn, words)}}, where `words` must appear in
the failure message (None: any failure will do), and RIGHT = {exercise: {label: fn}}.
They are the mistakes learners make and the alternatives they write; grading must fail
every WRONG one with a message that names the idea, and give full marks to every RIGHT one.
"""
