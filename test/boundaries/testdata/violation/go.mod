module example.com/violation

go 1.26.0
