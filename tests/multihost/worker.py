"""One process of a local multi-process run: `nemocascade.main` on N fake CPU devices.

    JAX_PLATFORMS=cpu python -m tests.multihost.worker --num_cpu_devices=4 \
        --config=configs/sft.py:tiny --workdir=/tmp/nc_mp \
        --coordinator_address=127.0.0.1:12355 --num_processes=2 --process_id=0

The device count has to be fixed before JAX creates its CPU backend, which
`nemocascade.main` leaves to the launcher; everything else is the real entry
point (flags, distributed initialization, dispatch to the stage).
"""

import jax
from absl import app, flags

from nemocascade import main as main_lib

_NUM_CPU_DEVICES = flags.DEFINE_integer("num_cpu_devices", 8, "Fake CPU devices of this process.")


def run(argv):
    jax.config.update("jax_num_cpu_devices", _NUM_CPU_DEVICES.value)
    main_lib.main(argv)


if __name__ == "__main__":
    app.run(run)
