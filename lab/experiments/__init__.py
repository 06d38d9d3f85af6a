"""The lab's experiments: the code that produced lab/results/ (scripts run as `python3 -m lab.experiments.NAME`
from a clone) and the report that `deltalens reproduce` writes (lab/experiments/report/). Not installed:
it works from a clone of the repository, beside lab/grids/ and lab/results/, and imports the library as
`deltalens`."""
