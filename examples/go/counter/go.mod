module lockbroker.dev/examples/counter

go 1.19

require lockbroker.dev/client v0.1.0

replace lockbroker.dev/client => ../../../clients/go
