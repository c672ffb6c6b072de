module lockbroker.dev/client

go 1.19
