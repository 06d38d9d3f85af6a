"""The reproduce report: the experiment grid's results judged against the paper's claims, tables and figures."""
