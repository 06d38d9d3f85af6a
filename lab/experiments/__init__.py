"""The lab's experiments: the code that produced results/ (scripts run as `python3 -m experiments.NAME`
from a clone) and the report that `deltalens reproduce` writes (experiments/report/). Not installed:
it works from a clone of the repository, beside sweep/ and results/, and imports the library as
`deltalens`."""
