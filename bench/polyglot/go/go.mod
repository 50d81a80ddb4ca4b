module stompfast.bench/gostomp

go 1.21

require github.com/go-stomp/stomp/v3 v3.1.3
