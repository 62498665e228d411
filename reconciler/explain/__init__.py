"""Why is my pod pending, in plain words: ``python -m reconciler explain`` (no loop).

Pure functions over a ``Scene`` read with the user's own credentials
(``reconciler.cli`` is the shell): ``scene`` (what is read), ``states`` (the table of
states, tried in order), ``explain`` (the notes, the answer and its rendering).
"""
