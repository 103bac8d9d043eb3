"""The measured configuration: what the controller, the Helm chart, new ClusterQueues and the
simulator's `kohort` policy run when nobody says otherwise.

Rule: every default of a scheduling knob is defined here once and read from here (the
controller's flags and Settings, the ClusterQueue model and so its CRD, the simulator); the
chart's values.yaml cannot import it, so a unit test holds it to these numbers. Plain numbers
only, no imports: every layer may read them. The figures behind each value are in
docs/simulator.md (Philly, 4x and 8x, homogeneous and mixed nodes).
"""

from __future__ import annotations

# Per ClusterQueue (spec.preemption): gangs of the queue are never victims in their first ten
# minutes, and a gang waits half an hour before it may evict others; capacity often comes back
# by itself in that time, and an eviction throws work away.
MINIMUM_RUNTIME_SECONDS = 600
EVICT_AFTER_SECONDS = 1800

# Controller flags and chart values: a placement-aware reclaim throws away at most 0.1x the work
# the preemptor lost by waiting. The starvation guard is off (0): on Philly it cost p95 wait at
# every threshold tried (1 h, 6 h), and on a trace where one queue borrows from the other it
# multiplied the work thrown away by four. Clusters where big gangs share a queue with streams
# of small jobs turn it on (bench/bench_starvation.py: a 16-GPU gang waits 9 h, not 52 h).
WASTE_BUDGET = 0.1
STARVATION_AFTER_SECONDS = 0

# Controller flag, chart value and the simulator's `kohort` policy: fair order adds to each
# queue's share now what it borrowed lately, averaged with this half-life (0: the share now
# alone). Off: on Philly 8x every half-life tried (1 h, 6 h, 24 h) evicted a fifth to a third
# more often and threw more work away, and at 24 h on mixed nodes raised the p95 wait
# (bench/bench_sim_philly.py --half-lives; docs/simulator.md). Clusters that want a team's
# borrowing of yesterday to count today turn it on (bench/bench_fair_over_time.py: 86400).
USAGE_HALF_LIFE_SECONDS = 0

# Controller flag and chart value: pending gangs' start forecasts are refreshed at most this
# often (seconds; 0: no forecasts). A refresh is spread over passes within the budget below, so
# at a large backlog one takes longer than this and the next starts when it is done.
FORECAST_REFRESH_SECONDS = 30.0
# Controller flag: the CPU a pass spends at most on refreshing start forecasts (milliseconds;
# the slice of a forward run under way is finished). At 10,000 pending a refresh then spreads
# over a few thousand passes (bench/bench_forecast.py; docs/performance.md).
FORECAST_BUDGET_MS = 0.5
# Controller flag: the CPU a pass spends at most on computing queue positions (milliseconds; the
# step under way is finished, and a run's first step, the fork of the engine, is made whole),
# so that positions at a large backlog cost each pass a bounded slice rather than holding one
# pass every `--positions-period` for the whole computation. bench/bench_positions.py at 1,000
# queues and 7,992 pending: a pass spent 1.8 ms median on positions (the one forking the engine
# 24 ms, against 434 ms for a whole report) and a computation took 183 to 201 passes
# (docs/performance.md); a larger budget shortens that in proportion.
POSITIONS_BUDGET_MS = 2.0
# And the forecasts it writes at most (each costs the pass about what an admission's status
# write does); a pass that writes makes no refresh step.
FORECAST_WRITES = 2
# Controller flag and bench_forecast: forecasts assume the traffic of this many past seconds
# comes again (each gang created in that window arrives anew every window after), so that gangs
# submitted later that will overtake (priority, fair share) are counted (0: none).
FORECAST_ARRIVALS_SECONDS = 0.0
# With the guard on, reserve future capacity for the starving gang (backfill reservations: the
# nodes that free up first, usable meanwhile by gangs that will be done before then) instead of
# holding nodes idle; see docs/simulator.md.
STARVATION_BACKFILL = False
