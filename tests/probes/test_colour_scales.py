"""Heatmap colour scales are fixed by the statistic (core/colour_scales.py; issue 55): the same range on every model."""

import numpy as np

import deltalens as dl
from deltalens.core.colour_scales import kind_of, scale_for
from deltalens.probes.census import Census


def test_each_statistic_has_its_kinds_range():
    assert kind_of("beta_gt1") == kind_of("beta_gt1_action") == kind_of("reflection_fraction") == "share"
    assert kind_of("min_eigenvalue") == kind_of("min_decayed_eigenvalue") == "eigenvalue"
    assert kind_of("mean_beta") == kind_of("mean_beta_action") == "beta"
    assert kind_of("effective_rank") == "rank" and kind_of("tokens") is None
    assert (scale_for("beta_gt1")["zmin"], scale_for("beta_gt1")["zmax"]) == (0.0, 1.0)
    assert (scale_for("mean_beta")["zmin"], scale_for("mean_beta")["zmid"], scale_for("mean_beta")["zmax"]) == (0, 1, 2)
    assert "0 to 1" in scale_for("beta_gt1")["colorbar"]["title"]["text"]  # the bar says its range


def test_an_all_zero_census_sits_at_the_bottom_of_its_scale_not_mid_scale():
    import pandas as pd

    heads = pd.DataFrame(
        [{"layer": 0, "head": h, "beta_gt1": 0.0, "min_eigenvalue": 0.2, "mean_beta": 0.8} for h in range(2)]
    )
    for column, low, high in (("beta_gt1", 0.0, 1.0), ("min_eigenvalue", -1.0, 1.0), ("mean_beta", 0.0, 2.0)):
        trace = dl.census_figure(Census(heads, "qwen3_5"), column).data[0]
        assert (trace.zmin, trace.zmax) == (low, high)
    assert np.all(dl.census_figure(Census(heads, "qwen3_5")).data[0].z == 0)


def test_beta_heatmaps_use_the_beta_scale(shipped_s3, shipped_s3_batch):
    report = dl.eigenvalue_report(shipped_s3, shipped_s3_batch)
    trace = dl.beta_heatmap(report).data[0]
    assert (trace.zmin, trace.zmid, trace.zmax) == (0.0, 1.0, 2.0)
