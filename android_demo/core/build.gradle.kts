// The plain-Java core (no Android dependency): tokenizers, bridge, n-gram cache, verification, loop.
plugins {
    `java-library`
}

java {
    sourceCompatibility = JavaVersion.VERSION_11
    targetCompatibility = JavaVersion.VERSION_11
}

repositories {
    mavenCentral()
}

dependencies {
    testImplementation("junit:junit:4.13.2")
}

tasks.test {
    // Golden vectors and tokenizers come from the Python side: `make golden` in the repository root.
    systemProperty("omnidraft.golden", rootDir.resolve("../build/java/golden").path)
    systemProperty("omnidraft.models", System.getProperty("user.home") + "/.cache/omnidraft/models")
    maxHeapSize = "1500m"
}
