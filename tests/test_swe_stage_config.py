"""configs/stage4_swe.py validates at every size; the swe reward options name their field."""

import pytest

from configs import stage4_swe
from nemocascade import config as config_lib


@pytest.mark.parametrize("size", ["tiny", "small", "8b", "14b"])
def test_stage4_swe_validates_at_every_size(size):
    cfg = config_lib.from_config_dict(stage4_swe.get_config(size))
    assert cfg.stage == "stage4_swe" and cfg.rl.domains == ("swe",) and cfg.rl.reward == "swe"
    assert cfg.rl.mode == "thinking"
    assert cfg.train.seq_len <= cfg.model.max_seq_len
    if size in ("8b", "14b"):  # C1 Table 20
        assert (cfg.rl.group_size, cfg.rl.temperature, cfg.rl.top_p) == (16, 1.0, 0.95)
        assert (cfg.optim.lr, cfg.rl.max_new_tokens) == (2.5e-6, 16_384)
        assert cfg.train.batch_size == 128 * 16


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("swe_shaping", 1.5, r"config.rl.swe_shaping must be in \[0, 1\]"),
        ("swe_judge", "nocolon", "config.rl.swe_judge: swe judge 'nocolon': expected"),
        ("swe_judge", "no_such_module_xyz:fn", "config.rl.swe_judge: .* cannot import"),
        ("swe_judge", "json:no_such_fn", "config.rl.swe_judge: .* has no function 'no_such_fn'"),
    ],
)
def test_swe_reward_options_name_their_field(field, value, message):
    cd = stage4_swe.get_config("tiny")
    cd.rl[field] = value
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.from_config_dict(cd)
