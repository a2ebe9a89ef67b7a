"""The consumer's wing: everything that knows AISimulate
(aisimulate==0.13.0.dev202610270000000085), and nothing the core needs.

  grids.py          its grid rules: the grids --grid aisimulate / aisimulate-native derive
                    from the engine's limits, and the points of its plans (aisimulate:PATH),
                    handed to the core as a plain points.choice.GridChoice
  consumer_plan.py  the collection plan it reads beside an export
  export/           `sdbench export --to aisimulate` (command.py: the command's arguments)
  repeatability.py  its import policy on a profile's repeats
  fidelity.py       its predictions of a served workload (consumer_side.py, run in its own
                    Python: the one file that imports AISimulate)

The core (points, engine, observer, collector, artifact, wire) imports nothing from here
(tests/test_layers.py holds the rule).
"""
