"""The `deltalens` command line: parsing and printing only.

`main.py` dispatches; each subcommand is one module here (`register(subparsers)` adds its parser,
`run(args)` does the work through the library). Command modules import the library inside their
functions, not at the top: `deltalens --help` imports every command module, and the library
costs torch (~1.6 s to import on a 2-core CPU), TransformerLens (~3 s more) and fla (~6 s more).
"""
