# history_partitions.py: the settings of docs/history.md (partitions exist on PostgreSQL; SQLite ignores them)
import lockgate as lg

app = lg.App()
store = "sqlite:///history.db"

lg.Engine(app, store, retention="30d")                                # a partition a day (the default)
lg.Engine(app, store, retention="12h", history_partition="hour")      # an hour each
lg.Engine(app, store, retention="90d", history_partition="week")      # a week each
try:
    lg.Engine(app, store, retention="1d", history_partition="week")
except lg.InvalidHistoryOption as exc:
    print(exc.field, "-", exc.problem)
