package helper

import (
	"bytes"
	"encoding/xml"
	"strconv"
	"time"
)

// launchdPlist is the launchd job of one helper: run once at load, never
// restarted by launchd (a helper that dies has lost its VM; the agent
// decides what next), and given exitTimeout after SIGTERM to stop its VM
// before launchd kills it. It is plain Go so that it is tested on Linux.
func launchdPlist(label string, args []string, logPath string, exitTimeout time.Duration) []byte {
	var b bytes.Buffer
	str := func(s string) {
		b.WriteString("<string>")
		_ = xml.EscapeText(&b, []byte(s))
		b.WriteString("</string>")
	}
	key := func(k string) { b.WriteString("\n\t<key>" + k + "</key>") }
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>`)
	key("Label")
	str(label)
	key("ProgramArguments")
	b.WriteString("<array>")
	for _, a := range args {
		str(a)
	}
	b.WriteString("</array>")
	key("RunAtLoad")
	b.WriteString("<true/>")
	key("KeepAlive")
	b.WriteString("<false/>")
	key("ExitTimeOut")
	b.WriteString("<integer>" + strconv.Itoa(int(exitTimeout.Seconds())) + "</integer>")
	key("StandardOutPath")
	str(logPath)
	key("StandardErrorPath")
	str(logPath)
	b.WriteString("\n</dict>\n</plist>\n")
	return b.Bytes()
}
