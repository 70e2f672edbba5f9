"""The small world the search tests build (a few hundred passages instead of tens of thousands)."""

SMALL = {"cities": 300, "towns": 20, "companies": 30, "people": 200, "distractors": 100}

# the spec overrides that put an example's environment and data on the small world
SMALL_SETS = [f"{where}.world.{k}={v}" for where in ("environment.args", "data.train.args", "data.eval.args")
              for k, v in SMALL.items()]
# and on its dev set, for the examples that have one (examples/search.yaml)
DEV_SETS = [f"data.dev.args.world.{k}={v}" for k, v in SMALL.items()]
