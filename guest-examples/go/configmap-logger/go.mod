module kubewasm.io/guest-examples/go

go 1.27
